"""async all_reduce issued on the default stream, work.wait() called inside a side-stream context, output then read on the default stream.

EXPECTED: hazard
KINDS: read-after-write
REASON: Work.wait() makes the *current* stream (here: side) wait for the NCCL stream; the default stream remains unordered with the collective's write.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    x = torch.full((1 << 15,), float(rank + 1), device="cuda")
    work = dist.all_reduce(x, async_op=True)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        work.wait()                        # only side waits
    y = x + 1                              # BUG: default stream reads x
    torch.cuda.synchronize()
    print(y[0].item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
