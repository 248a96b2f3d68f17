"""bf16 gradient averaging with ReduceOp.AVG and an FP8 amax reduction with ReduceOp.MAX on bf16 and float32
tensors, on a TP subgroup and the world: values chosen exact in bf16, so the GPU's result is exactly the CPU's.

EXPECTED: clean
WORLD_SIZE: 4
MODELLED ON: TransformerEngine's amax reduction across the TP/DP group (`torch.distributed.all_reduce(amax_buffer,
op=torch.distributed.ReduceOp.MAX, group=...)` in transformer_engine/pytorch/fp8.py `reduce_and_update_fp8_tensors`)
and Megatron's `average_in_collective` gradient reduction (`ReduceOp.AVG`, param_and_grad_buffer.py line 397).
REASON: ProcessGroupNCCL maps AVG to ncclAvg and MAX to ncclMax for bf16 (ncclBfloat16); the chosen values and
their averages are exactly representable in bf16, so any summation order gives the CPU result.
"""
import os

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    tp = dist.new_group([0, 1])
    tp2 = dist.new_group([2, 3])
    my_tp, tp_ranks = (tp, [0, 1]) if rank < 2 else (tp2, [2, 3])
    base = torch.tensor([0.5, -1.0, 2.0, 0.25, 8.0, -0.125])
    grad = (base * (rank + 1)).to(torch.bfloat16).cuda()
    dist.all_reduce(grad, op=dist.ReduceOp.AVG)
    want = base * sum(r + 1 for r in range(world)) / world
    assert torch.equal(grad.float().cpu(), want), grad
    amax = torch.tensor([float(rank), -3.0 * rank, 0.5 * (4 - rank)], dtype=torch.bfloat16, device="cuda")
    dist.all_reduce(amax, op=dist.ReduceOp.MAX, group=my_tp)
    want_amax = torch.stack([torch.tensor([float(r), -3.0 * r, 0.5 * (4 - r)]) for r in tp_ranks]).max(0).values
    assert torch.equal(amax.float().cpu(), want_amax), amax
    amax32 = torch.full((16,), float(rank * rank), device="cuda")
    dist.all_reduce(amax32, op=dist.ReduceOp.MAX)
    assert amax32.max().item() == float((world - 1) ** 2)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
