"""Default and side streams both write the same buffer with no ordering between them.

EXPECTED: hazard
KINDS: write-after-write
REASON: kernels on different streams are unordered; two unordered writes to the same bytes race.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    buf = torch.empty(1 << 15, device="cuda")
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    buf.fill_(1.0)                          # default stream writes
    with torch.cuda.stream(side):
        buf.fill_(2.0)                      # BUG: side writes, unordered with the default fill
    torch.cuda.synchronize()
    print(buf.sum().item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
