"""Rank 0 isends a buffer and overwrites it in place before req.wait().

EXPECTED: hazard
KINDS: write-after-read
REASON: isend reads the buffer asynchronously on the NCCL stream; modifying it before wait() races with the read.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    if rank == 0:
        buf = torch.full((1 << 15,), 1.0, device="cuda")
        req = dist.isend(buf, dst=1)
        buf.mul_(10)                       # BUG: overwrite before the send completed
        req.wait()
    elif rank == 1:
        got = torch.empty(1 << 15, device="cuda")
        dist.recv(got, src=0)
        print(got[:3].tolist())
    torch.cuda.synchronize()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
