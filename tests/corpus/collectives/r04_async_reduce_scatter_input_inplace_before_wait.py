"""async reduce_scatter_tensor; its input is modified in place on the default stream before work.wait().

EXPECTED: hazard
KINDS: write-after-read
REASON: the NCCL stream waited for the current stream only up to the call; the later in-place write on the current stream races with the collective's read of the input.
"""
import os
import torch
import torch.distributed as dist

N = 1 << 14


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    world = dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    inp = torch.full((world * N,), float(rank + 1), device="cuda")
    out = torch.zeros(N, device="cuda")
    work = dist.reduce_scatter_tensor(out, inp, async_op=True)
    inp.mul_(100.0)                       # BUG: overwrite input before wait
    work.wait()
    print(out[0].item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
