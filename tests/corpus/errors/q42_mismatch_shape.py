"""all_reduce with rank-dependent tensor length (1024 vs 1025).

EXPECTED: error
ERROR: CollectiveMismatch
REASON: collective tensors must have the same size on every rank.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    x = torch.ones(1024 + rank, device="cuda")
    dist.all_reduce(x)
    print(x.sum().item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
