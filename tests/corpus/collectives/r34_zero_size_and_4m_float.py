"""all_reduce and all_gather_into_tensor of 0-element tensors, then an all_reduce of 4M floats and a 4M-element all_gather.

EXPECTED: clean
REASON: zero-element collectives are valid no-ops; large collectives give exact sums of small integers.
"""
import os
import torch
import torch.distributed as dist

BIG = 4 * 1024 * 1024


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    world = dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    e = torch.empty(0, device="cuda")
    dist.all_reduce(e)
    eo = torch.empty(0, device="cuda")
    dist.all_gather_into_tensor(eo, torch.empty(0, device="cuda"))
    assert e.numel() == 0 and eo.numel() == 0
    x = (torch.arange(BIG, device="cuda", dtype=torch.float32) % 7) + rank
    dist.all_reduce(x)
    exp = (torch.arange(BIG, dtype=torch.float32) % 7) * world + sum(range(world))
    assert torch.equal(x.cpu(), exp)
    part = torch.full((BIG // world,), float(rank), device="cuda")
    full = torch.empty(BIG, device="cuda")
    dist.all_gather_into_tensor(full, part)
    assert torch.equal(full.cpu(), torch.arange(world, dtype=torch.float32).repeat_interleave(BIG // world))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
