"""A tensor produced on a side stream is copied to the host with .cpu() while still inside the side-stream context.

EXPECTED: clean
REASON: .cpu() runs on the current stream, which is the producing stream, and synchronizes it.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    side = torch.cuda.Stream()
    x = torch.arange(12, device="cuda", dtype=torch.float32)
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        y = x.view(3, 4).sum(dim=1) + rank
        host = y.cpu()
        n = int(y[0])
        flag = bool((y > 0).all())
    assert host.tolist() == [6.0 + rank, 22.0 + rank, 38.0 + rank], host.tolist()
    assert n == 6 + rank and flag
    torch.cuda.synchronize()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
