"""NCCL 2.7 profile: async reduce_scatter_tensor, input modified in place on the default stream before wait().

EXPECTED: hazard
KINDS: write-after-read
NCCL: 2.7
REASON: the internal NCCL stream reads the input concurrently with later work of the current stream until wait().
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    world = dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    inp = torch.full((world * 8192,), float(rank + 1), device="cuda")
    out = torch.empty(8192, device="cuda")
    w = dist.reduce_scatter_tensor(out, inp, async_op=True)
    inp.zero_()                            # BUG
    w.wait()
    print(out[0].item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
