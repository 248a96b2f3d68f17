"""x read on a side stream through a view; `del x` then `v = None` frees the storage (the view was the last ref)
with no record_stream; a new default-stream allocation reuses and overwrites the block.

EXPECTED: hazard
KINDS: reuse-after-free
KINDS_ALSO: write-after-read
REASON: the block is freed when the last view dies and reused at once by its owning default stream; the side read is not ordered before.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    x = torch.randn(1 << 16, device="cuda")
    v = x[100:]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        r = v.sum()
    del x
    v = None                                  # BUG: freed, no record_stream(side)
    y = torch.zeros(1 << 16, device="cuda")
    torch.cuda.current_stream().wait_stream(side)
    print(r.item(), y.sum().item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
