"""x written on the default stream; an async all_reduce is issued inside `with torch.cuda.stream(side)` with no side.wait_stream(default).

EXPECTED: hazard
KINDS: read-after-write
KINDS_ALSO: write-after-write
REASON: the NCCL stream waits for the *current* stream at issue (here side), not for the default stream that wrote x.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    side = torch.cuda.Stream()
    x = torch.empty(1 << 15, device="cuda")
    x.fill_(float(rank + 1))                      # default stream writes x
    with torch.cuda.stream(side):
        work = dist.all_reduce(x, async_op=True)   # BUG: side never waited on default
        work.wait()
    torch.cuda.current_stream().wait_stream(side)
    print(x[0].item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
