"""all_reduce with rank-dependent dtype (float32 on rank 0, bfloat16 on rank 1, same element count).

EXPECTED: error
ERROR: CollectiveMismatch
REASON: collective tensors must have the same dtype on every rank.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    x = torch.ones(2048, device="cuda", dtype=torch.float32 if rank == 0 else torch.bfloat16)
    dist.all_reduce(x)
    print(x.float().sum().item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
