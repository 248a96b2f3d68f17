"""Stream A writes buf[:N//2 + 1] while stream B reads buf[N//2:]: one element overlaps.

EXPECTED: hazard
KINDS: read-after-write
KINDS_ALSO: write-after-read
REASON: element N//2 is written on A and read on B with no ordering between the streams.
"""
import os
import torch
import torch.distributed as dist

N = 1 << 14


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    buf = torch.arange(N, dtype=torch.float32, device="cuda")
    sa, sb = torch.cuda.Stream(), torch.cuda.Stream()
    sa.wait_stream(torch.cuda.current_stream())
    sb.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(sa):
        buf[: N // 2 + 1].mul_(-1)
    with torch.cuda.stream(sb):
        s = buf[N // 2:].sum()
    cur = torch.cuda.current_stream()
    cur.wait_stream(sa)
    cur.wait_stream(sb)
    print(s.item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
