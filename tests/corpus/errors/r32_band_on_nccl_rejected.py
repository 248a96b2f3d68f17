"""all_reduce with ReduceOp.BAND on an int tensor over NCCL.

EXPECTED: error
ERROR: ValueError
REASON: NCCL has no bitwise reductions; ProcessGroupNCCL's getNcclReduceOp throws ValueError("Cannot use ReduceOp.BAND with NCCL") (likewise BOR/BXOR).
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    x = torch.tensor([0b1100 | rank, 0b1010], dtype=torch.int32, device="cuda")
    dist.all_reduce(x, op=dist.ReduceOp.BAND)
    print(x.tolist())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
