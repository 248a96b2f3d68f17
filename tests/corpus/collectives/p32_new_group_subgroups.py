"""Subgroups via new_group: all_reduce within pairs {0,1},{2,3}, then a world broadcast.

EXPECTED: clean
WORLD_SIZE: 4
REASON: every rank creates every group in the same order; sync collectives are ordered on the current stream.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    g01 = dist.new_group([0, 1])
    g23 = dist.new_group([2, 3])
    mine = g01 if rank < 2 else g23
    x = torch.tensor([float(rank + 1)], device="cuda")
    dist.all_reduce(x, group=mine)
    expect = 3.0 if rank < 2 else 7.0
    assert x.item() == expect, x.item()
    b = x.clone() if rank == 3 else torch.zeros(1, device="cuda")
    dist.broadcast(b, src=3)
    assert b.item() == 7.0, b.item()
    assert dist.get_rank(mine) == rank % 2
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
