"""The user synchronizes in the wrong direction: side.wait_stream(default) after side's work, then default reads.

EXPECTED: hazard
KINDS: read-after-write
REASON: wait_stream only makes the calling stream wait; the default stream is still unordered with the side stream's write.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    x = torch.randn(1 << 14, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        y = x.abs().sqrt()
    side.wait_stream(torch.cuda.current_stream())   # BUG: wrong direction
    z = y * 2
    torch.cuda.synchronize()
    print(z.sum().item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
