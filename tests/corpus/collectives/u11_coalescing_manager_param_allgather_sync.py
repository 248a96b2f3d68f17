"""Megatron distributed-optimizer parameter all-gather without overlap: every bucket's all_gather_into_tensor of the
local shard into the full buffer, issued with async_op=False inside `_coalescing_manager(group, async_ops=False)`;
the forward reads the gathered parameters right after the block.

EXPECTED: clean
MODELLED ON: megatron/core/distributed/param_and_grad_buffer.py (megatron-core 0.16.1)
`_ParamAndGradBucketGroup.start_param_sync` (`with _coalescing_manager(self.intra_distributed_optimizer_instance_group,
async_ops=async_op) as cm:` ... `dist_all_gather_func(bucket.param_data, local_data_view, group=..., async_op=async_op)`;
with overlap_param_gather=False `self.param_gather_handle = None`), lines 273-300.
REASON: distributed_c10d.py `_coalescing_manager`: the captured all-gathers are launched as one
`all_gather_single_coalesced` / `allgather_into_tensor_coalesced` with asyncOp=False and, `elif work is not None:
work.wait()`; a synchronous collective orders the current stream after it (torch >= 2.8: it runs on the current
stream; earlier: the current stream waits its end event).
"""
import os

import torch
import torch.distributed as dist
from torch.distributed import _coalescing_manager

SIZES = (1024, 96)


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    param_data = [torch.zeros(n * world, dtype=torch.bfloat16, device="cuda") for n in SIZES]
    views = [p.view(world, -1)[rank] for p in param_data]                  # shard_buffer(...)[rank]
    for v, n in zip(views, SIZES):                                          # the optimizer wrote its shard
        v.copy_(torch.arange(n, device="cuda").to(torch.bfloat16) + 100 * rank)
    with _coalescing_manager(async_ops=False) as cm:
        for p, v in zip(param_data, views):
            dist.all_gather_into_tensor(p, v, async_op=False)
    out = [p.float() * 2 for p in param_data]                               # the forward pass
    for o, n in zip(out, SIZES):
        want = torch.cat([(torch.arange(n).to(torch.bfloat16) + 100 * r).float() * 2 for r in range(world)])
        assert torch.equal(o.cpu(), want), o[:4]
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
