"""Rank 1 posts irecv and reads the buffer before req.wait().

EXPECTED: hazard
KINDS: read-after-write
REASON: irecv is async (runs on the NCCL stream); the buffer is only valid after req.wait().
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    buf = torch.zeros(1 << 14, device="cuda")
    if rank == 0:
        payload = torch.full((1 << 14,), 3.0, device="cuda")
        req = dist.isend(payload, dst=1)
        req.wait()
    elif rank == 1:
        req = dist.irecv(buf, src=0)
        doubled = buf * 2                  # BUG: before req.wait()
        req.wait()
        print(doubled.sum().item())
    torch.cuda.synchronize()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
