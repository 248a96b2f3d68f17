"""all_gather_into_tensor into a column slice of a larger buffer (a non-contiguous view): ProcessGroupNCCL refuses
it with a ValueError ("Tensors must be contiguous") instead of writing the gathered rows into the columns.

EXPECTED: error
ERROR: ValueError
MODELLED ON: gathering tensor-parallel shards straight into a slice of a fused QKV / gate-up weight buffer
(`fused[:, :hidden]`) in checkpoint conversion code, instead of gathering into a contiguous temporary and copying.
REASON: ProcessGroupNCCL.cpp _allgather_base -> check_gpu_single_tensor: `if (!tensor.is_contiguous(
tensor.suggest_memory_format())) { C10_THROW_ERROR(ValueError, "Tensors must be contiguous"); }`.
"""
import os

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    fused = torch.zeros(4 * world, 16, device="cuda")
    shard = torch.full((4, 8), float(rank), device="cuda")
    dist.all_gather_into_tensor(fused[:, :8], shard)                      # a [4*world, 8] view with stride (16, 1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
