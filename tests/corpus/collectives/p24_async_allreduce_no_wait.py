"""async all_reduce, output read before work.wait().

EXPECTED: hazard
KINDS: read-after-write
REASON: async collectives run on the NCCL stream; outputs may only be used after work.wait() (torch.distributed docs).
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    x = torch.full((1 << 15,), float(rank + 1), device="cuda")
    work = dist.all_reduce(x, async_op=True)
    y = x * 2                              # BUG: before wait
    work.wait()
    print(y.sum().item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
