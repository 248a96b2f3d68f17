"""ReduceOp.AVG: reduce_scatter_tensor with AVG (FSDP-style gradient reduce-scatter), all_reduce AVG in bf16 and fp32,
and a group of size 1 averaging to itself.

EXPECTED: clean
WORLD_SIZE: 4
MODELLED ON: torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py (reduce_scatter_tensor with ReduceOp.AVG when
the reduce dtype supports it) and Megatron-Core DDP `average_in_collective` (all_reduce ReduceOp.AVG).
REASON: NCCL's ncclAvg computes the sum divided by the number of ranks (torch.distributed docs: ReduceOp.AVG,
"only available with the NCCL backend"); a one-rank group's average is the tensor itself.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    vals = [torch.arange(8, dtype=torch.float32) * (r + 1) for r in range(world)]
    inp = vals[rank].cuda()
    out = torch.empty(8 // world, device="cuda")
    dist.reduce_scatter_tensor(out, inp, op=dist.ReduceOp.AVG)
    avg = sum(vals) / world
    n = 8 // world
    assert torch.allclose(out.cpu(), avg[rank * n:(rank + 1) * n]), out.cpu()

    b = torch.full((16,), float(2 * rank), dtype=torch.bfloat16, device="cuda")
    dist.all_reduce(b, op=dist.ReduceOp.AVG)
    assert torch.all(b.float().cpu() == float(world - 1)).item(), b

    f = torch.tensor([1.0, -3.0, 0.5], device="cuda") * (rank + 1)
    dist.all_reduce(f, op=dist.ReduceOp.AVG)
    mean = sum(range(1, world + 1)) / world
    assert torch.allclose(f.cpu(), torch.tensor([1.0, -3.0, 0.5]) * mean), f.cpu()

    groups = [dist.new_group([r]) for r in range(world)]
    s = torch.full((4,), 5.0 + rank, device="cuda")
    dist.all_reduce(s, op=dist.ReduceOp.AVG, group=groups[rank])
    assert torch.all(s.cpu() == 5.0 + rank).item()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
