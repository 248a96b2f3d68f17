"""async reduce_scatter_tensor; its output is read on the default stream before work.wait().

EXPECTED: hazard
KINDS: read-after-write
REASON: an async collective runs on the internal NCCL stream; until wait() the current stream is not ordered after its write of the output.
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
    early = out * 2                       # BUG: read before wait
    work.wait()
    torch.cuda.synchronize()
    print(early[0].item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
