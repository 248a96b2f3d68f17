"""Tensor used on a side stream; the owning (default) stream waits for the side stream before the tensor is freed.

EXPECTED: clean
REASON: after default.wait_stream(side), any reuse of the block on the default stream is ordered after the side stream's read, so record_stream is not needed.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    side = torch.cuda.Stream()
    x = torch.full((1 << 16,), 2.0, device="cuda")
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        y = x * x
    torch.cuda.current_stream().wait_stream(side)
    del x
    z = torch.full((1 << 16,), 5.0, device="cuda")    # reuses x's block on the default stream
    assert y.sum().item() == 4.0 * (1 << 16)
    assert z.sum().item() == 5.0 * (1 << 16)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
