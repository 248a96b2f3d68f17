"""Groups made with `new_group(ranks, use_local_synchronization=True)`, where only the members call new_group: ranks
0-1 and ranks 2-3 each build their own pair group (different call sites, no world-wide call), then a third group
[1, 2] built only by ranks 1 and 2; collectives run on each.

EXPECTED: clean
WORLD_SIZE: 4
MODELLED ON: torch.distributed.new_group docs (use_local_synchronization: "only ranks in the group need to call
new_group ... non-member ranks don't need to call into API and don't join the barrier"), as used for pipeline
stage-pair groups built lazily by the two stages only.
REASON: distributed_c10d.new_group with use_local_synchronization=True names the group from a hash of its ranks
(`_process_group_name(ranks, use_hashed_name=True)`) so members agree without the others; ProcessGroupNCCL makes its
communicator at the first collective. Values: plain sums.
"""
import os

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    if rank < 2:
        pair = dist.new_group([0, 1], use_local_synchronization=True)
    else:
        pair = dist.new_group([2, 3], use_local_synchronization=True)
    x = torch.full((16,), float(rank), device="cuda")
    dist.all_reduce(x, group=pair)
    assert x[0].item() == (1.0 if rank < 2 else 5.0)
    if rank in (1, 2):
        middle = dist.new_group([1, 2], use_local_synchronization=True)
        y = torch.full((4,), float(10 * rank), device="cuda")
        dist.all_reduce(y, group=middle)
        assert y.tolist() == [30.0] * 4
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
