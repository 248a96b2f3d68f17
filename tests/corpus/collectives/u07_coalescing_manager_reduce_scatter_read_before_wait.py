"""Megatron distributed-optimizer gradient reduce-scatter issued through `_coalescing_manager(async_ops=True)`, and
the optimizer step reads the local gradient shard before the manager's handle is waited (finish_grad_sync skipped).

EXPECTED: hazard
KINDS: read-after-write
KINDS_ALSO: write-after-read
MODELLED ON: megatron/core/distributed/param_and_grad_buffer.py (megatron-core 0.16.1) start_grad_sync with
use_distributed_optimizer (`local_data_view = shard_buffer(bucket.grad_data, ...)[rank]`;
`dist_reduce_scatter_func(local_data_view, bucket.grad_data, op=reduce_op, group=..., async_op=async_op)` inside
`_coalescing_manager(communication_group, async_ops=async_op)`, lines 433-449), with the `grad_reduce_handle.wait()`
of finish_grad_sync (line 536) missing.
REASON: the coalesced reduce_scatter_tensor_coalesced launched at the manager's exit runs on the NCCL stream
(asyncOp=True); only the work's wait() orders the current stream after it (torch.distributed docs, "Synchronous and
asynchronous collective operations"; distributed_c10d.py `_coalescing_manager` appends the work to `cm`).
"""
import os

import torch
import torch.distributed as dist
from torch.distributed import _coalescing_manager

N = 1 << 15


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    grad_data = [torch.full((N,), float(rank + 1 + b), device="cuda") for b in range(2)]
    shards = [g.view(world, N // world)[rank] for g in grad_data]        # shard_buffer(...)[rank]
    main_params = [torch.zeros(N // world, device="cuda") for _ in range(2)]
    with _coalescing_manager(async_ops=True) as cm:
        for g, s in zip(grad_data, shards):
            dist.reduce_scatter_tensor(s, g, op=dist.ReduceOp.AVG, async_op=True)
    handle = cm
    for p, s in zip(main_params, shards):               # BUG: handle.wait() missing before the step
        p.add_(s, alpha=-1.0)
    print(f"rank {rank}: updated shard sums {[p.sum().item() for p in main_params]}")
    handle.wait()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
