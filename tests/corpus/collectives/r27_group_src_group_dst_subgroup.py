"""Subgroup [1,3] of a 4-rank world: broadcast with group_src=1 (global 3), scatter with group_src=0 (global 1), reduce with group_dst=1, gather with group_dst=0.

EXPECTED: clean
WORLD_SIZE: 4
REASON: group_src / group_dst are ranks inside the group (torch >= 2.6); ranks 0 and 2 are non-members and skip the calls.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    g = dist.new_group([1, 3])
    if rank in (1, 3):
        b = torch.full((8,), float(rank), device="cuda")
        dist.broadcast(b, group=g, group_src=1)
        assert torch.all(b == 3.0).item(), b.tolist()
        out = torch.empty(4, device="cuda")
        sl = [torch.full((4,), 11.0, device="cuda"), torch.full((4,), 33.0, device="cuda")] if rank == 1 else None
        dist.scatter(out, scatter_list=sl, group=g, group_src=0)
        assert torch.all(out == (11.0 if rank == 1 else 33.0)).item()
        r = torch.full((4,), float(rank), device="cuda")
        dist.reduce(r, group=g, group_dst=1)
        if rank == 3:
            assert torch.all(r == 4.0).item()
        gl = [torch.empty(2, device="cuda") for _ in range(2)] if rank == 1 else None
        dist.gather(torch.full((2,), float(rank * 10), device="cuda"), gather_list=gl, group=g, group_dst=0)
        if rank == 1:
            assert gl[0].tolist() == [10.0, 10.0] and gl[1].tolist() == [30.0, 30.0]
    z = torch.full((2,), float(rank), device="cuda")
    dist.all_reduce(z)
    assert torch.all(z == 6.0).item()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
