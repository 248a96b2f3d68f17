"""mask computed on a side stream; torch.nonzero(mask) on the default stream without waiting on the side stream.

EXPECTED: hazard
KINDS: read-after-write
REASON: nonzero synchronizes the host with the *current* stream only; it reads mask unordered with its producer.
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
        mask = x > 0.5
    idx = torch.nonzero(mask)             # BUG: no wait on side
    print(idx.shape)
    torch.cuda.current_stream().wait_stream(side)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
