"""Both ranks all_reduce the same shape/dtype but rank 0 uses SUM and rank 1 uses MAX.

EXPECTED: error
ERROR: CollectiveMismatch
REASON: reduce op must match across ranks (TORCH_DISTRIBUTED_DEBUG=DETAIL checks op type); NCCL behaviour is undefined.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    x = torch.full((256,), float(rank), device="cuda")
    dist.all_reduce(x, op=dist.ReduceOp.SUM if rank == 0 else dist.ReduceOp.MAX)
    print(x.sum().item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
