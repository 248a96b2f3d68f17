"""Unseeded torch.randn on the GPU gives the same values on every rank (each process's CUDA generator starts from PyTorch's fixed default seed).

EXPECTED: clean
REASON: CUDA default generators are created with default_rng_seed_val (67280421310721) in every process; all_gather then compares.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    world = dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    x = torch.randn(256, device="cuda")
    parts = [torch.empty_like(x) for _ in range(world)]
    dist.all_gather(parts, x)
    for p in parts:
        assert torch.equal(p, x)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
