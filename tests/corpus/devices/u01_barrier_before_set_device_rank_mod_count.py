"""A torchrun script that calls dist.barrier() right after init_process_group and only then set_device: the barrier
runs on GPU (global rank % device count), one GPU per rank, so it works (with c10d's warning); the all_reduce after
set_device is on each rank's own GPU.

EXPECTED: clean
MODELLED ON: the common script prologue `dist.init_process_group("nccl"); dist.barrier(); torch.cuda.set_device(
local_rank)` (e.g. HF transformers' `torch_distributed_zero_first` / accelerate's `wait_for_everyone` before the
device is chosen).
REASON: torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp ProcessGroupNCCL::barrier, "Select device to use for
barrier": device_ids[0], else the bound device, else the first used device, else
`globalRank() % localDeviceCount_` ("we use rank to ensure that each process is on a different GPU"); never simply
the current device. torch/distributed/distributed_c10d.py barrier's note lists the same order.
"""
import os

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    assert torch.cuda.current_device() == 0          # nothing set yet: every process starts on cuda:0
    dist.barrier()                                   # on cuda:(rank % device_count): not a duplicate GPU
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    x = torch.full((1024,), float(rank + 1), device="cuda")
    dist.all_reduce(x)
    want = float(sum(range(1, world + 1)))
    assert torch.equal(x.cpu(), torch.full((1024,), want)), x[:4]
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
