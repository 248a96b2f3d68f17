"""ReduceOp.AVG where the arithmetic of ncclAvg shows: fp16 gradients near the top of the fp16 range (their sum
overflows fp16, their average does not), and int32 counters whose sum is negative and odd (C division truncates
toward zero: -3 / 2 = -1, not floor's -2).

EXPECTED: clean
MODELLED ON: fp16 gradient averaging in collective (Megatron `average_in_collective=True` ->
`ReduceOp.AVG`, param_and_grad_buffer.py line 397, with fp16 grads under loss scaling) and integer bookkeeping
averaged across data-parallel ranks (e.g. skipped-step or token-count deltas that can be negative).
REASON: NCCL implements ncclAvg on floating types as a sum pre-multiplied by 1/nranks (src/enqueue.cc:
ncclAvg -> ncclDevPreMulSum with scalar 1/nRanks) and on integers as FuncSumPostDiv (src/device/reduce_kernel.h:
postOp `return T(x/n)`, C division). Values: 30000 + 30000 in fp16; -3 / 2 and 7 / 2 truncated.
"""
import os

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    assert world == 2
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    g = torch.full((1024,), 60000.0, dtype=torch.float16, device="cuda")
    dist.all_reduce(g, op=dist.ReduceOp.AVG)
    assert torch.isfinite(g).all() and g[0].item() == 60000.0, g[:2]
    c = torch.tensor([-1 - rank, 3 + rank, -8, 5], dtype=torch.int32, device="cuda")   # sums -3, 7, -16, 10
    dist.all_reduce(c, op=dist.ReduceOp.AVG)
    assert c.tolist() == [-1, 3, -8, 5], c.tolist()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
