"""Megatron-style bucketed gradient all-reduce: every bucket's all_reduce(async_op=True) is issued inside one
`_coalescing_manager(group, async_ops=True)` block, the handle kept is the manager, and `cm.wait()` comes before
the optimizer reads the gradients.

EXPECTED: clean
MODELLED ON: megatron/core/distributed/param_and_grad_buffer.py (megatron-core 0.16.1) `_ParamAndGradBucketGroup.
start_grad_sync` (`with stream_context, _coalescing_manager(communication_group, async_ops=async_op) as cm:` ...
`torch.distributed.all_reduce(bucket.grad_data, op=reduce_op, group=communication_group, async_op=async_op)`;
`self.grad_reduce_handle = cm`) and `finish_grad_sync` (`self.grad_reduce_handle.wait()`), lines 433-537.
REASON: torch/distributed/distributed_c10d.py `_coalescing_manager`: inside the block all_reduce only records a
`_CollOp` (and returns an `_IllegalWork`); at exit one `allreduce_coalesced` with asyncOp=async_ops is launched and
its work appended to `cm`; `_CoalescingManager.wait()` waits each work (current stream waits the NCCL stream).
"""
import os

import torch
import torch.distributed as dist
from torch.distributed import _coalescing_manager

BUCKETS = (4096, 1000, 257)


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    group = dist.new_group(list(range(world)))
    grad_data = [torch.arange(n, dtype=torch.float32, device="cuda").mul_(rank + 1) for n in BUCKETS]
    params = [torch.ones(n, device="cuda") for n in BUCKETS]
    with _coalescing_manager(group, async_ops=True) as cm:
        for g in grad_data:
            dist.all_reduce(g, op=dist.ReduceOp.SUM, group=group, async_op=True)
    grad_reduce_handle = cm
    grad_reduce_handle.wait()                       # finish_grad_sync
    for p, g in zip(params, grad_data):
        p.add_(g, alpha=-0.5)
    tot = sum(range(1, world + 1))
    for n, p in zip(BUCKETS, params):
        want = torch.ones(n) - 0.5 * torch.arange(n, dtype=torch.float32) * tot
        assert torch.equal(p.cpu(), want), (n, p[:4])
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
