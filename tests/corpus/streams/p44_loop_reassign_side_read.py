"""Loop: a fresh input is created on the default stream each iteration and accumulated on a side stream; the name is reassigned each step.

EXPECTED: hazard
KINDS: reuse-after-free
REASON: the previous x is freed on reassignment while the side stream may still read it; the default stream immediately reuses the block for the next torch.randn (needs record_stream).
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    side = torch.cuda.Stream()
    acc = torch.zeros(1 << 15, device="cuda")
    side.wait_stream(torch.cuda.current_stream())
    for step in range(5):
        x = torch.randn(1 << 15, device="cuda")
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            acc.add_(x.square())
    torch.cuda.current_stream().wait_stream(side)
    print(acc.mean().item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
