"""torch.cat([a, b], out=buf) on the default stream where b was produced on a side stream with no join.

EXPECTED: hazard
KINDS: read-after-write
REASON: cat reads b on the default stream, unordered with b's producer on the side stream.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    a = torch.randn(1 << 12, 8, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        b = torch.exp(a) * 2
    buf = torch.empty(2 << 12, 8, device="cuda")
    torch.cat([a, b], out=buf)               # BUG: no wait on side
    print(buf.sum().item())
    torch.cuda.current_stream().wait_stream(side)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
