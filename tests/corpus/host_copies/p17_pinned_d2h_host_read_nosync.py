"""non_blocking D2H copy into a pinned buffer, then the host reads the buffer without synchronizing.

EXPECTED: hazard
KINDS: host-read
REASON: CUDA semantics (pinned memory buffers): a non_blocking copy into pinned memory is asynchronous w.r.t. the host; a sync is required before reading.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    y = torch.randn(1 << 14, device="cuda").abs()
    buf = torch.empty(1 << 14, pin_memory=True)
    buf.copy_(y, non_blocking=True)
    print("host sum", buf.sum().item())    # BUG: no synchronize
    torch.cuda.synchronize()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
