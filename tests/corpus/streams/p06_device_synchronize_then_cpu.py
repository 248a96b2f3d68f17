"""Side-stream work, torch.cuda.synchronize(), then read on the default stream.

EXPECTED: clean
REASON: torch.cuda.synchronize() blocks the host until all streams finish, so later launches happen after the side work.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    x = torch.full((1000,), float(rank + 1), device="cuda")
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        y = x * 3.0
        y += 1.0
    torch.cuda.synchronize()
    z = y * 2.0                            # default stream, after host sync
    assert z.sum().item() == 1000 * (3.0 * (rank + 1) + 1.0) * 2.0
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
