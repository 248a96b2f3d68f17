"""Plain synchronous all_reduce of a rank-dependent tensor, then host check.

EXPECTED: clean
REASON: torch>=2.8 sync collectives run on the current stream; .tolist() copies on the current stream and syncs.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    world = dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    x = torch.arange(8, device="cuda", dtype=torch.float32) * (rank + 1)
    dist.all_reduce(x)
    total = sum(range(1, world + 1))
    got = x.tolist()
    assert got == [float(i * total) for i in range(8)], got
    s = x.sum().item()
    assert s == 28.0 * total, s
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
