"""new_group([0]) is entered by every rank; rank 1 (not a member) calls all_reduce(group=g): torch.distributed
returns without doing anything (warning 'Running all_reduce on global rank 1 which does not belong to the given
group'), rank 0 reduces over a group of one.

EXPECTED: clean
REASON: torch.distributed.distributed_c10d: `if _rank_not_in_group(group): _warn_not_in_group(...); return` for collectives; new_group returns GroupMember.NON_GROUP_MEMBER on non-members.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    g = dist.new_group([0])
    x = torch.full((64,), float(rank + 5), device="cuda")
    if rank == 1:
        assert g == dist.GroupMember.NON_GROUP_MEMBER
    r = dist.all_reduce(x, group=g)
    assert r is None
    assert torch.equal(x.cpu(), torch.full((64,), float(rank + 5)))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
