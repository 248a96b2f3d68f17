"""Backend gloo on CPU tensors: all_reduce (SUM, MAX), all_gather, broadcast from src=1, async all_reduce + wait, reduce_scatter-free mix.

EXPECTED: clean
WORLD_SIZE: 3
REASON: gloo collectives on CPU tensors are synchronous (async ones complete by wait()); values by definition.
"""
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    world = dist.get_world_size()
    x = torch.arange(6, dtype=torch.float32) + rank
    dist.all_reduce(x)
    assert torch.equal(x, torch.arange(6, dtype=torch.float32) * world + sum(range(world)))
    m = torch.tensor([rank, -rank], dtype=torch.int64)
    dist.all_reduce(m, op=dist.ReduceOp.MAX)
    assert m.tolist() == [world - 1, 0]
    outs = [torch.empty(3) for _ in range(world)]
    dist.all_gather(outs, torch.full((3,), float(rank * rank)))
    assert [o[0].item() for o in outs] == [float(r * r) for r in range(world)]
    b = torch.tensor([42.0, 43.0]) if rank == 1 else torch.zeros(2)
    dist.broadcast(b, src=1)
    assert b.tolist() == [42.0, 43.0]
    a = torch.ones(1000) * (rank + 1)
    w = dist.all_reduce(a, async_op=True)
    w.wait()
    assert torch.all(a == float(sum(range(1, world + 1)))).item()
    assert dist.get_backend() == "gloo"
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
