"""NCCL 2.7 profile: synchronous all_gather_into_tensor issued inside a side-stream context on a tensor produced on the default stream.

EXPECTED: hazard
KINDS: read-after-write
NCCL: 2.7
REASON: torch<2.8 ProcessGroupNCCL makes its NCCL stream wait only for the *current* stream (side), not for the default stream that produced the input.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    x = torch.empty(1 << 16, device="cuda")
    out = torch.empty(2 << 16, device="cuda")
    torch.cuda.synchronize()
    x.fill_(float(rank + 1))               # default stream writes the input
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        dist.all_gather_into_tensor(out, x)   # BUG: side never waited for the default stream
    torch.cuda.current_stream().wait_stream(side)
    print(out[0].item(), out[-1].item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
