"""NCCL 2.7 profile: all_reduce of a temporary, result copied out, temporary freed and the memory reused.

EXPECTED: clean
NCCL: 2.7
REASON: torch<2.8 ProcessGroupNCCL record_streams collective tensors on its NCCL stream and makes the current stream wait for sync ops.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    world = dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    results = torch.empty(4, 1024, device="cuda")
    for i in range(4):
        tmp = torch.full((1024,), float(rank + i), device="cuda")
        dist.all_reduce(tmp)
        results[i].copy_(tmp)
        del tmp
        scratch = torch.full((1024,), -7.0, device="cuda")
        del scratch
    expect = [float(sum(range(world)) + world * i) for i in range(4)]
    assert results[:, 0].tolist() == expect, results[:, 0].tolist()
    assert torch.all(results == results[:, :1]).item()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
