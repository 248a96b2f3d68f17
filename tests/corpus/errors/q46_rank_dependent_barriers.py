"""Rank 0 calls dist.barrier() twice, rank 1 once, then both continue to an all_reduce.

EXPECTED: error
ERROR: Deadlock|CollectiveMismatch
REASON: barrier is a collective over the group; a rank-dependent count leaves rank 0's second barrier unmatched (or matched with the all_reduce).
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    for _ in range(2 if rank == 0 else 1):
        dist.barrier()
    x = torch.ones(8, device="cuda")
    dist.all_reduce(x)
    print(x.sum().item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
