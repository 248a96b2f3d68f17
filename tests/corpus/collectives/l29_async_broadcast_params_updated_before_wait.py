"""Rank 0 broadcasts the parameters asynchronously (a weight sync to the other ranks) and every rank starts the
next in-place optimizer update of the same tensor before work.wait().

EXPECTED: hazard
KINDS: write-after-read
KINDS_ALSO: read-after-write, write-after-write
MODELLED ON: parameter / buffer broadcast overlapped with compute (DDP's `_sync_buffers` with broadcast_buffers, a
hand-rolled `dist.broadcast(p, 0, async_op=True)` weight sync in RL trainers) with the wait placed after the update.
REASON: the broadcast reads the source's tensor (rank 0) and writes the others' on the NCCL stream; the in-place
update on the current stream is not ordered after it without work.wait() (torch.distributed docs, async_op=True).
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    p = torch.full((1 << 15,), float(rank + 1), device="cuda")
    grad = torch.full_like(p, 0.5)
    work = dist.broadcast(p, src=0, async_op=True)
    p.add_(grad, alpha=-0.1)                      # BUG: the update before work.wait()
    work.wait()
    print(p[0].item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
