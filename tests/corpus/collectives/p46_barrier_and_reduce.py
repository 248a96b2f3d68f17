"""dist.reduce to rank 0, barrier, then a world all_reduce of a max.

EXPECTED: clean
REASON: synchronous collectives in order on the default stream.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    world = dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    x = torch.tensor([rank + 1.0, 10.0 * rank], device="cuda")
    dist.reduce(x, dst=0, op=dist.ReduceOp.SUM)
    if rank == 0:
        assert x.tolist() == [float(sum(range(1, world + 1))), 10.0 * sum(range(world))], x.tolist()
    dist.barrier()
    m = torch.tensor([float(rank)], device="cuda")
    dist.all_reduce(m, op=dist.ReduceOp.MAX)
    assert m.item() == world - 1
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
