"""Prefetch into a preallocated device buffer on a side stream; the default stream consumes it without waiting.

EXPECTED: hazard
KINDS: read-after-write
REASON: the copy on the side stream is unordered with the default stream's read; wait_stream/wait_event is required.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    host = torch.randn(1 << 15).pin_memory()
    buf = torch.empty(1 << 15, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        buf.copy_(host, non_blocking=True)
    y = torch.nn.functional.softmax(buf, dim=0)     # BUG: default stream never waited for the copy
    torch.cuda.synchronize()
    print(y.max().item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
