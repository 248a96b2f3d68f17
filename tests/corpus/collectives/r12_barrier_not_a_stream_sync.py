"""A tensor is written on a side stream; dist.barrier(); the default stream reads it.

EXPECTED: hazard
KINDS: read-after-write
REASON: ProcessGroupNCCL's barrier is a dummy all_reduce plus a synchronize of the *current* stream only; it orders nothing on other streams of this device.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    side = torch.cuda.Stream()
    buf = torch.zeros(1 << 16, device="cuda")
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        buf.add_(float(rank + 1))
    dist.barrier()
    y = buf * 2                              # BUG: default never waited on side
    torch.cuda.synchronize()
    print(y[0].item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
