"""A gradient bucket is all-reduced inside a `_coalescing_manager` block and then scaled in place before the block
ends: the fast path launches the coalesced all_reduce only at the block's exit, so the reduction sees the scaled
values (every rank scales first, then all are summed).

EXPECTED: clean
MODELLED ON: gradient pre-division placed after the collective call inside a coalescing block (megatron-core
param_and_grad_buffer.py start_grad_sync scales `bucket.grad_data *= gradient_scaling_factor` before the block:
this program shows what happens when such code is moved inside it).
REASON: torch/distributed/distributed_c10d.py `_coalescing_manager`: collectives "supporting Fast Path coalescing are
captured" as `_CollOp`s and launched together by `group.allreduce_coalesced(tensors, opts)` after `yield cm`; the
tensors are read when that coalesced collective runs, in stream order after the in-place scale.
"""
import os

import torch
import torch.distributed as dist
from torch.distributed import _coalescing_manager


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    a = torch.full((1000,), float(rank + 1), device="cuda")
    b = torch.arange(24, dtype=torch.float32, device="cuda") + rank
    with _coalescing_manager(async_ops=False):
        dist.all_reduce(a)
        dist.all_reduce(b)
        a.mul_(0.5)                                   # before the launch: reduced as scaled
        b.add_(1.0)
    tot = float(sum(range(1, world + 1)))
    assert torch.equal(a.cpu(), torch.full((1000,), 0.5 * tot)), a[:3]
    want_b = sum(torch.arange(24, dtype=torch.float32) + r + 1.0 for r in range(world))
    assert torch.equal(b.cpu(), want_b), b[:3]
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
