"""Tensor allocated on the default stream is read on a side stream, freed, and its block reused on the default stream.

EXPECTED: hazard
KINDS: reuse-after-free
REASON: CUDA semantics / caching allocator: a block is reused immediately by its owning stream after free; use on another stream needs record_stream.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    side = torch.cuda.Stream()
    x = torch.randn(1 << 16, device="cuda")         # owned by the default stream
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        y = torch.sin(x) * 2                        # side stream reads x
    del x                                           # BUG: no x.record_stream(side)
    z = torch.zeros(1 << 16, device="cuda")         # default stream reuses x's block and writes it
    torch.cuda.current_stream().wait_stream(side)
    print((y.sum() + z.sum()).item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
