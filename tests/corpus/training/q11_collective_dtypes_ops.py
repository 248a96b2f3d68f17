"""all_reduce over bf16 (SUM), fp16 (MAX), int64 (MIN, SUM beyond 2**53), fp32 (AVG, PRODUCT); values vs reference.

EXPECTED: clean
WORLD_SIZE: 3
REASON: synchronous collectives on the default stream; NCCL reduction semantics per dtype.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    vals = [torch.arange(8, dtype=torch.float32) * (r + 1) - 3 * r for r in range(world)]
    a = vals[rank].to(torch.bfloat16).cuda()
    dist.all_reduce(a)
    assert a.dtype == torch.bfloat16
    assert torch.equal(a.cpu(), sum(v.to(torch.bfloat16) for v in vals)), a
    b = vals[rank].half().cuda()
    dist.all_reduce(b, op=dist.ReduceOp.MAX)
    assert torch.equal(b.cpu(), torch.stack(vals).max(0).values.half())
    c = torch.tensor([2 ** 53 + rank, -rank, 7 * rank], dtype=torch.int64, device="cuda")
    d = c.clone()
    dist.all_reduce(c, op=dist.ReduceOp.MIN)
    assert c.tolist() == [2 ** 53, -(world - 1), 0], c
    dist.all_reduce(d)
    assert d.tolist() == [world * 2 ** 53 + sum(range(world)), -sum(range(world)), 7 * sum(range(world))], d
    e = vals[rank].cuda()
    dist.all_reduce(e, op=dist.ReduceOp.AVG)
    assert torch.allclose(e.cpu(), torch.stack(vals).mean(0)), e
    f = torch.full((4,), float(rank + 2), device="cuda")
    dist.all_reduce(f, op=dist.ReduceOp.PRODUCT)
    expect = 1.0
    for r in range(world):
        expect *= r + 2
    assert torch.equal(f.cpu(), torch.full((4,), expect))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
