"""A metric averaged over ranks on the CPU side of a "cpu:gloo,cuda:nccl" process group: gloo has no ReduceOp.AVG
(nor PREMUL_SUM), so `dist.all_reduce(cpu_tensor, op=ReduceOp.AVG)` raises RuntimeError "Cannot use ReduceOp.AVG
with Gloo" on every rank, and the program falls back to dividing locally and summing, which gives the mean. The
same AVG on a CUDA tensor goes to NCCL, which has it (ncclAvg).

EXPECTED: clean
WORLD_SIZE: 2
MODELLED ON: evaluation loops that average a CPU loss with ReduceOp.AVG and fail on gloo (the usual workaround:
divide by the world size, then SUM).
RULE: https://pytorch.org/docs/stable/distributed.html (ReduceOp: "AVG is only available with the NCCL backend");
torch/csrc/distributed/c10d/ProcessGroupGloo.cpp toFunction: `case ReduceOp::AVG: TORCH_CHECK(false, "Cannot use
ReduceOp.AVG with Gloo")`.
WHAT SIMDIST SAYS: clean (before c04 it averaged the CPU tensor as NCCL would, so the except branch never ran and
the assertion below failed).
"""
import os

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("cpu:gloo,cuda:nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    loss = torch.tensor([float(rank + 1)])
    try:
        dist.all_reduce(loss, op=dist.ReduceOp.AVG)
        refused = False
    except RuntimeError as e:
        assert "Cannot use ReduceOp.AVG with Gloo" in str(e), e
        refused = True
    assert refused
    loss /= world
    dist.all_reduce(loss, op=dist.ReduceOp.SUM)
    assert loss.item() == sum(r + 1 for r in range(world)) / world
    on_gpu = torch.tensor([float(rank + 1)], device="cuda")
    dist.all_reduce(on_gpu, op=dist.ReduceOp.AVG)                # NCCL: ncclAvg
    assert on_gpu.item() == loss.item()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
