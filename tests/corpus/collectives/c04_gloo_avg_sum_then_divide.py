"""A metric averaged over ranks on the CPU side of a "cpu:gloo,cuda:nccl" process group: gloo has ReduceOp.AVG
since torch 2.8 (pytorch/pytorch#149781), a SUM and then the result divided in place by the group size, so an
integer tensor's AVG raises (the float quotient cannot be cast back) and float16 sums can overflow before the
division, where NCCL's ncclAvg (a sum pre-multiplied by 1/n) does not; gloo has no PREMUL_SUM. The same AVG on a
CUDA tensor goes to NCCL.

EXPECTED: clean
WORLD_SIZE: 3
MODELLED ON: evaluation loops that average a CPU loss or a token count with ReduceOp.AVG.
RULE: torch/csrc/distributed/c10d/ProcessGroupGloo.cpp (AVG: sum, then divide by the size; PREMUL_SUM: "Cannot
use ReduceOp.PREMUL_SUM with Gloo"). Measured with torch 2.13's gloo on this machine (3 ranks): float16
[0.1, 0.7, 65000] x (1, 2, 1) averages to [0.13330078125, 0.93359375, inf]; int32 raises "result type Float
can't be cast to the desired output type Int".
WHAT SIMDIST SAYS: clean. (c5 first refused gloo's AVG as torch < 2.8 does; torch 2.13 computes it.)
"""
import os

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("cpu:gloo,cuda:nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    loss = torch.tensor([float(rank + 1)])
    dist.all_reduce(loss, op=dist.ReduceOp.AVG)
    assert loss.item() == sum(r + 1 for r in range(world)) / world
    half = torch.tensor([0.1, 0.7, 65000.0], dtype=torch.float16) * (rank + 1 if rank < 2 else 1)
    dist.all_reduce(half, op=dist.ReduceOp.AVG)  # the sum overflows float16 before the division, as on gloo
    assert half.tolist() == [0.13330078125, 0.93359375, float("inf")], half
    count = torch.tensor([rank + 1], dtype=torch.int32)
    try:
        dist.all_reduce(count, op=dist.ReduceOp.AVG)
        raise AssertionError("gloo cannot average an int32 tensor in place")
    except RuntimeError as e:
        assert "can't be cast to the desired output type Int" in str(e), e
    try:
        dist.all_reduce(loss, op=dist._make_nccl_premul_sum(2.0))
        raise AssertionError("gloo has no PREMUL_SUM")
    except RuntimeError as e:
        assert "Cannot use ReduceOp.PREMUL_SUM with Gloo" in str(e), e
    on_gpu = torch.tensor([float(rank + 1)], device="cuda")
    dist.all_reduce(on_gpu, op=dist.ReduceOp.AVG)                # NCCL: ncclAvg
    assert on_gpu.item() == loss.item()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
