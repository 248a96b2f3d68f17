"""w.t() is modified in place on a side stream (after waiting), while the default stream reads w via .view(-1)
without waiting on the side stream.

EXPECTED: hazard
KINDS: write-after-read
KINDS_ALSO: read-after-write
REASON: .t() and .view() alias the same storage; the side write and default read are unordered.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    w = torch.randn(128, 256, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    flat = w.view(-1)
    s = flat.sum()                       # default reads w (issued first)
    with torch.cuda.stream(side):
        w.t().mul_(2)                    # side writes the same bytes, not ordered after the read
    torch.cuda.current_stream().wait_stream(side)
    print(s.item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
