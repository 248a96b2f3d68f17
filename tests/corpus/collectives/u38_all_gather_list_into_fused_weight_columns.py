"""Row-parallel weight gather for checkpoint export: each rank's [rows, cols/tp] shard is all-gathered with the list
form directly into column slices of the fused full weight (`full[:, j*c:(j+1)*c]`, non-contiguous views), and the
gradient of a fused buffer is reduce-scattered from column slices; the list forms copy through a flat buffer, so
the views are filled in logical order.

EXPECTED: clean
MODELLED ON: Megatron-Bridge's TP gather for row-parallel layers (`torch.distributed.all_gather([empty_like(t)]*n,
t, group)` then `torch.cat(..., dim=1)`; FACTS.md "Megatron-Bridge conversion"), written to gather straight into
the destination columns to save the concatenation.
REASON: ProcessGroupNCCL::allgather (same-size outputs): ncclAllGather into `newLikeFlat(outputTensors_)`, then
`outputTensors_[j].copy_(outputFlattened[j])`; ProcessGroupNCCL::reduce_scatter copies each input into the flat
buffer first; only the single input/output tensor goes through check_gpu_single_tensor. Values: torch.cat on CPU.
"""
import os

import torch
import torch.distributed as dist

ROWS, COLS = 6, 4


def shard(r):
    return torch.arange(ROWS * COLS, dtype=torch.float32).reshape(ROWS, COLS) + 100 * r


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    full = torch.empty(ROWS, COLS * world, device="cuda")
    cols = [full[:, j * COLS:(j + 1) * COLS] for j in range(world)]
    dist.all_gather(cols, shard(rank).cuda())
    assert torch.equal(full.cpu(), torch.cat([shard(r) for r in range(world)], dim=1))
    fused_grad = torch.cat([shard(r) for r in range(world)], dim=1).cuda() * (rank + 1)
    my_grad = torch.empty(ROWS, COLS, device="cuda")
    dist.reduce_scatter(my_grad, [fused_grad[:, j * COLS:(j + 1) * COLS] for j in range(world)])
    assert torch.equal(my_grad.cpu(), shard(rank) * sum(range(1, world + 1)))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
