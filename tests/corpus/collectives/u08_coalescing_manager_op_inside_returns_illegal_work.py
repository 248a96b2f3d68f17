"""Inside a `_coalescing_manager(async_ops=True)` block each all_reduce(async_op=True) returns an `_IllegalWork`; a
script that keeps those per-op handles and waits them (instead of `cm.wait()`) gets c10d's ValueError.

EXPECTED: error
ERROR: ValueError
MODELLED ON: porting a per-bucket `handles.append(dist.all_reduce(b, async_op=True))` / `for h in handles: h.wait()`
loop into a coalescing block (the pattern megatron-core switched to in param_and_grad_buffer.py start_grad_sync).
REASON: torch/distributed/distributed_c10d.py all_reduce: `if group in _world.pg_coalesce_state: ...
_world.pg_coalesce_state[group].append(coll); if async_op: return _IllegalWork()`; `_IllegalWork.__getattribute__`
raises `ValueError(f"Illegal to call {name} on IllegalWork object")` for wait / is_success / result / ...
"""
import os

import torch
import torch.distributed as dist
from torch.distributed import _coalescing_manager


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    buckets = [torch.full((512,), float(rank + i), device="cuda") for i in range(3)]
    handles = []
    with _coalescing_manager(async_ops=True) as cm:
        for b in buckets:
            handles.append(dist.all_reduce(b, async_op=True))
    cm.wait()
    for h in handles:
        h.wait()                                     # ValueError: Illegal to call wait on IllegalWork object
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
