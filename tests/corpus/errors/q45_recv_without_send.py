"""Rank 1 posts a blocking recv from rank 0; rank 0 never sends.

EXPECTED: error
ERROR: Deadlock
REASON: a recv with no matching send blocks forever on real NCCL; the simulator must report it, not hang.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    buf = torch.empty(128, device="cuda")
    if rank == 1:
        dist.recv(buf, src=0)
        print(buf.sum().item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
