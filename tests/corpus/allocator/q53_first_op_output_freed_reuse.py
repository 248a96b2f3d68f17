"""A default-stream op output (first use of this op/shape in the process) is read on a side stream, then dropped
without record_stream; a same-size default-stream allocation reuses and overwrites its block.

EXPECTED: hazard
WORLD_SIZE: 1
KINDS: reuse-after-free
KINDS_ALSO: write-after-read
REASON: caching allocator: the block is reused immediately by its owning stream; must be reported on every seed, including the first run of a process (what `simdist run script.py` does).
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    side = torch.cuda.Stream()
    x = torch.randn(12345, device="cuda")
    x2 = x.exp()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        y = x2 * 2
    del x2                                       # BUG: no x2.record_stream(side)
    z = torch.zeros(12345, device="cuda")
    torch.cuda.current_stream().wait_stream(side)
    print((y.sum() + z.sum()).item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
