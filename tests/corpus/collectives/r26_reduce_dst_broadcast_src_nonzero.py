"""reduce(MAX) to dst=2, reduce(SUM) to dst=1, broadcast from src=1, in a 3-rank world.

EXPECTED: clean
WORLD_SIZE: 3
REASON: the root gets the reduction; broadcast copies the src's tensor to every rank.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    world = dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    x = torch.tensor([rank * 1.0, 10.0 - rank, (rank - 1) ** 2 * 1.0], device="cuda")
    dist.reduce(x, dst=2, op=dist.ReduceOp.MAX)
    if rank == 2:
        assert x.tolist() == [2.0, 10.0, 1.0], x.tolist()
    y = torch.full((33,), float(rank + 1), device="cuda")
    dist.reduce(y, dst=1)
    if rank == 1:
        assert torch.all(y == float(sum(range(1, world + 1)))).item()
    b = torch.arange(50, device="cuda", dtype=torch.float32) if rank == 1 else torch.zeros(50, device="cuda")
    dist.broadcast(b, src=1)
    assert torch.equal(b.cpu(), torch.arange(50, dtype=torch.float32))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
