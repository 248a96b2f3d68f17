"""Rank 0 calls one more barrier than rank 1, and rank 1 simply returns (destroy_process_group) afterwards.

EXPECTED: error
ERROR: Deadlock|CollectiveMismatch
REASON: rank 0's extra barrier can never complete.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.barrier()
    if rank == 0:
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
