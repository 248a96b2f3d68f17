"""Two world-sized groups, both warmed up in the same order; then rank 0 all_reduces on A then B, rank 1 on B then A, all on the default stream.

EXPECTED: error
ERROR: Deadlock|CollectiveMismatch
REASON: each rank's default stream holds the two NCCL kernels in opposite orders; each first kernel spins waiting for a peer whose matching kernel is queued behind the other: a real NCCL hang (NCCL docs: operations on different communicators must be issued in a consistent order).
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    world = dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    ga = dist.new_group(list(range(world)))
    gb = dist.new_group(list(range(world)))
    w = torch.ones(8, device="cuda")
    dist.all_reduce(w, group=ga)
    dist.all_reduce(w, group=gb)
    torch.cuda.synchronize()
    a = torch.ones(1024, device="cuda")
    b = torch.ones(1024, device="cuda")
    if rank == 0:
        dist.all_reduce(a, group=ga)
        dist.all_reduce(b, group=gb)
    else:
        dist.all_reduce(b, group=gb)
        dist.all_reduce(a, group=ga)
    torch.cuda.synchronize()
    print(a[0].item(), b[0].item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
