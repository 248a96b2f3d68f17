"""Correct double buffering: H2D copies of pinned batches on a copy stream into two preallocated device buffers, events both ways.

EXPECTED: clean
REASON: the compute stream waits on the copy event before reading; the copy stream waits on the compute event before overwriting a buffer.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    n = 8
    host = [torch.full((1 << 14,), float(i)).pin_memory() for i in range(n)]
    bufs = [torch.empty(1 << 14, device="cuda") for _ in range(2)]
    copied = [torch.cuda.Event() for _ in range(2)]
    consumed = [torch.cuda.Event() for _ in range(2)]
    copy_stream = torch.cuda.Stream()
    compute = torch.cuda.current_stream()
    copy_stream.wait_stream(compute)       # buffers were allocated on the compute stream
    total = torch.zeros((), device="cuda")
    for i in range(n):
        k = i % 2
        with torch.cuda.stream(copy_stream):
            if i >= 2:
                copy_stream.wait_event(consumed[k])
            bufs[k].copy_(host[i], non_blocking=True)
            copied[k].record(copy_stream)
        compute.wait_event(copied[k])
        total += (bufs[k] * 2).sum()
        consumed[k].record(compute)
    torch.cuda.synchronize()
    assert total.item() == 2.0 * (1 << 14) * sum(range(n)), total.item()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
