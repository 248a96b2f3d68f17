"""non_blocking D2H into pinned memory, event recorded after the copy, event.synchronize() before the host reads.

EXPECTED: clean
REASON: the event covers the copy; Event.synchronize() blocks the host until the copy has completed.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    y = torch.arange(1 << 12, device="cuda", dtype=torch.float32) + rank
    buf = torch.empty(1 << 12).pin_memory()
    buf.copy_(y, non_blocking=True)
    ev = torch.cuda.Event()
    ev.record()
    ev.synchronize()
    assert torch.equal(buf, torch.arange(1 << 12, dtype=torch.float32) + rank)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
