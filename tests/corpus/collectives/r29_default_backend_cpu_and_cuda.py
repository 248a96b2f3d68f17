"""init_process_group("cpu:gloo,cuda:nccl"): the same program all_reduces a CPU tensor and a CUDA tensor, and all_gathers CPU tensors.

EXPECTED: clean
REASON: with both backends named, CPU tensors go to gloo and CUDA tensors to NCCL; both give the mathematical results.
(First written with init_process_group() and no backend: on 2x H200, torch 2.11, that makes NCCL only and the CPU
all_reduce fails with "No backend type associated with device type cpu"; simdist now does the same.)
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("cpu:gloo,cuda:nccl")
    rank = dist.get_rank()
    world = dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    c = torch.full((5,), float(rank + 1))
    g = torch.full((5,), float(rank + 1), device="cuda")
    dist.all_reduce(c)
    dist.all_reduce(g, op=dist.ReduceOp.MAX)
    assert torch.all(c == float(sum(range(1, world + 1)))).item()
    assert torch.all(g == float(world)).item()
    outs = [torch.zeros(2, dtype=torch.int64) for _ in range(world)]
    dist.all_gather(outs, torch.tensor([rank, rank + 100]))
    assert [o.tolist() for o in outs] == [[r, r + 100] for r in range(world)]
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
