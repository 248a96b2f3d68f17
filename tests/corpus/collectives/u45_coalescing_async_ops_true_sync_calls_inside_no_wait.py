"""A coalescing block opened with `async_ops=True` around all_reduce calls written as synchronous (async_op=False):
the manager's flag wins, the coalesced all-reduce is launched asynchronously on the NCCL stream at the block's
exit, and since the calls looked synchronous nobody calls `cm.wait()`: the reads that follow are unordered.

EXPECTED: hazard
KINDS: read-after-write
KINDS_ALSO: write-after-read
MODELLED ON: a helper that always opens `_coalescing_manager(group, async_ops=overlap)` (as megatron-core's
param_and_grad_buffer.py start_grad_sync does with `async_ops=async_op`) while a caller passes `async_op=False` to
the collectives and drops the handle, expecting synchronous semantics.
REASON: torch/distributed/distributed_c10d.py `_coalescing_manager`: inside the block all_reduce only records a
`_CollOp` (returns None for async_op=False); at exit `all_reduce_opts.asyncOp = async_ops` decides how the coalesced
`allreduce_coalesced` runs, and `if async_ops: cm.append(work)` (no wait) instead of `work.wait()`.
"""
import os

import torch
import torch.distributed as dist
from torch.distributed import _coalescing_manager


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    buckets = [torch.full((1 << 14,), float(rank + b), device="cuda") for b in range(2)]
    with _coalescing_manager(async_ops=True):
        for g in buckets:
            dist.all_reduce(g, async_op=False)          # looks synchronous; the manager launches it async
    norm = torch.stack([g.norm() for g in buckets]).sum()   # BUG: no cm.wait()
    print(f"rank {rank}: grad norm {norm.item()}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
