"""Default stream reads x (matmul); a side stream zeroes x in place without waiting.

EXPECTED: hazard
KINDS: write-after-read
REASON: the side stream's write is unordered with the default stream's pending read of the same tensor.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    x = torch.randn(256, 256, device="cuda")
    torch.cuda.synchronize()                # x is fully written before anything else
    side = torch.cuda.Stream()
    y = x @ x                               # default stream reads x
    with torch.cuda.stream(side):
        x.zero_()                           # BUG: no side.wait_stream(default)
    torch.cuda.synchronize()
    print(y.abs().sum().item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
