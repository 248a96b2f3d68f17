"""Subgroups whose ranks are given out of order: new_group([3, 1]) (sorted: group rank 0 is global 1),
new_group([3, 1], sort_ranks=False) (group rank 0 is global 3), new_subgroups(group_size=2) and
new_subgroups_by_enumeration([[3, 0], [2, 1]]); all_gather_into_tensor output order and broadcast(group_src=...).

EXPECTED: clean
WORLD_SIZE: 4
MODELLED ON: torch/distributed/distributed_c10d.py `new_group` (sort_ranks: "If True (the default), sort the ranks
list before creating the group. If False, preserve the caller-provided rank order so that position in the ranks list
determines group rank"), `new_subgroups`, `new_subgroups_by_enumeration`; Megatron's parallel_state building groups
from rank lists.
REASON: all_gather output chunk i is group rank i's input; get_group_rank / get_global_rank map by the group's
rank order; broadcast(group_src=k) sends group rank k's tensor.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    g_sorted = dist.new_group([3, 1])
    g_keep = dist.new_group([3, 1], sort_ranks=False)
    if rank in (1, 3):
        for g, order in ((g_sorted, [1, 3]), (g_keep, [3, 1])):
            assert dist.get_process_group_ranks(g) == order, (dist.get_process_group_ranks(g), order)
            assert dist.get_rank(g) == order.index(rank)
            assert dist.get_global_rank(g, 0) == order[0]
            out = torch.empty(2 * 3, device="cuda")
            dist.all_gather_into_tensor(out, torch.full((3,), float(rank), device="cuda"), group=g)
            assert out.cpu().tolist() == [float(order[0])] * 3 + [float(order[1])] * 3, (order, out.cpu())
            b = torch.full((2,), float(rank * 10), device="cuda")
            dist.broadcast(b, group=g, group_src=1)
            assert torch.all(b.cpu() == float(order[1] * 10)).item()

    cur, subs = dist.new_subgroups(group_size=2)
    assert dist.get_process_group_ranks(cur) == ([0, 1] if rank < 2 else [2, 3])
    t = torch.tensor([float(rank)], device="cuda")
    dist.all_reduce(t, group=cur)
    assert t.item() == (1.0 if rank < 2 else 5.0)

    cur2, subs2 = dist.new_subgroups_by_enumeration([[3, 0], [2, 1]])
    mine = [3, 0] if rank in (0, 3) else [2, 1]
    ranks2 = dist.get_process_group_ranks(cur2)
    assert ranks2 == sorted(mine), ranks2
    outs = [torch.empty(1, device="cuda") for _ in range(2)]
    dist.all_gather(outs, torch.tensor([rank * 1.5], device="cuda"), group=cur2)
    assert [o.item() for o in outs] == [r * 1.5 for r in ranks2]
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
