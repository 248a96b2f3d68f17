"""async all_reduce; work.wait() on the default stream; the output is then consumed on a side stream that never waited.

EXPECTED: hazard
KINDS: read-after-write
REASON: work.wait() orders only the current (default) stream after the NCCL stream; the side stream is unordered with the collective's write.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    side = torch.cuda.Stream()
    x = torch.full((1 << 15,), float(rank + 1), device="cuda")
    work = dist.all_reduce(x, async_op=True)
    work.wait()
    with torch.cuda.stream(side):
        y = x * 2                          # BUG: side never waited on default / NCCL
    torch.cuda.synchronize()
    print(y[0].item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
