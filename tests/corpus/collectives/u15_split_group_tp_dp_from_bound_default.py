"""torch.distributed.split_group: the default group (eagerly initialised with device_id) is split into TP groups
[[0, 1], [2, 3]] and DP groups [[0, 2], [1, 3]], and a split covering only ranks 0 and 1; each rank all-reduces in
its TP group and all-gathers in its DP group.

EXPECTED: clean
WORLD_SIZE: 4
MODELLED ON: torchtitan / DeviceMesh's fast path that builds sub-groups with `split_group` when the default group
has a bound device (torch/distributed/device_mesh.py `_init_one_process_group` -> `split_group(parent_pg=...,
split_ranks=..., group_desc=...)`), here called directly as torch's docs show.
REASON: torch/distributed/distributed_c10d.py split_group: needs `default_pg.bound_device_id` (else RuntimeError),
every rank of the parent calls it with the same split_ranks, each gets the group holding its group rank, ranks in
no split get None; ProcessGroupNCCL supports splitting (ncclCommSplit). Values: plain sums and gathers.
"""
import os

import torch
import torch.distributed as dist


def main():
    lr = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(lr)
    dist.init_process_group("nccl", device_id=torch.device("cuda", lr))
    rank, world = dist.get_rank(), dist.get_world_size()
    assert world == 4
    tp = dist.split_group(split_ranks=[[0, 1], [2, 3]], group_desc="tp")
    dp = dist.split_group(split_ranks=[[0, 2], [1, 3]], group_desc="dp")
    only_first = dist.split_group(split_ranks=[[0, 1]])
    assert (only_first is None) == (rank >= 2)
    tp_ranks = [0, 1] if rank < 2 else [2, 3]
    dp_ranks = [rank % 2, rank % 2 + 2]
    assert dist.get_process_group_ranks(tp) == tp_ranks
    assert dist.get_process_group_ranks(dp) == dp_ranks
    assert dist.get_rank(tp) == tp_ranks.index(rank) and dist.get_world_size(dp) == 2
    x = torch.full((1000,), float(rank + 1), device="cuda")
    dist.all_reduce(x, group=tp)
    assert torch.equal(x.cpu(), torch.full((1000,), float(sum(r + 1 for r in tp_ranks))))
    out = torch.empty(2, 3, device="cuda")
    dist.all_gather_into_tensor(out, torch.full((3,), float(rank), device="cuda"), group=dp)
    assert out[:, 0].tolist() == [float(r) for r in dp_ranks]
    if only_first is not None:
        y = torch.ones(8, device="cuda")
        dist.all_reduce(y, group=only_first)
        assert y.sum().item() == 16.0
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
