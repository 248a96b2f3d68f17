"""Rank 0 calls all_reduce, rank 1 calls broadcast (same tensor shape): mismatched collectives.

EXPECTED: error
ERROR: CollectiveMismatch
REASON: collectives must be called in the same order with the same kind on every rank (TORCH_DISTRIBUTED_DEBUG=DETAIL reports it; NCCL hangs or corrupts).
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    x = torch.ones(1024, device="cuda")
    if rank == 0:
        dist.all_reduce(x)
    else:
        dist.broadcast(x, src=0)
    torch.cuda.synchronize()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
