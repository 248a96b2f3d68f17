"""I6 PyTorch `_coalescing_manager(group, device, async_ops=True)`: `cm.works` was empty, so `cm.wait()` waited for
nothing and Apex's DistributedFusedAdam read gradient shards before the coalesced reduce-scatter finished.

EXPECTED: hazard
KINDS: read-after-write
INCIDENT: https://github.com/pytorch/pytorch/issues/122807 ("[c10d][NCCL] _coalescing_manager does not produce
proper work handle", 2024, torch 2.4.0.dev20240326): `print(len(cm.works)) # prints 0`, "cm.wait() becomes a no-op,
which causes read-before-write issues whenever _coalescing_manager is used"; Apex's test_dist_adam.py failed with
numerical mismatches "because it starts to do ops before coalesced communications are over". Fixes discussed:
pull/122651, pull/122849 (`_end_coalescing` returns the coalesced work), pull/123170 (do not overwrite the fast-path
work with `group._end_coalescing(device)`'s).
MODELLED ON: torch/distributed/distributed_c10d.py `_coalescing_manager` (fast path: collectives inside the block are
captured in `_world.pg_coalesce_state[group]` and launched as one coalesced collective at exit; `if device: work =
group._end_coalescing(device)` then replaced that work, and `_end_coalescing` returned no work, so
`cm.append(work)` appended nothing) and apex/contrib/optimizers/distributed_fused_adam.py
`DistributedFusedAdam._start_bucket_grad_sync` (`comm_stream.wait_stream(main_stream)`; under
`with torch.cuda.stream(comm_stream)`: `with _coalescing_manager(group, self.device, async_ops=True) as cm:`
`reduce_scatter_tensor(bucket.sync_grads_shard, bucket.grads_bucket, op=reduce_op, group=group, async_op=True)` per
bucket, then `cm.wait()`) and `_finish_bucket_grad_sync` (`main_stream.wait_stream(comm_stream)`, then the shards
are used).
SIMPLIFIED: torch 2.3's manager is written out in plain torch (`coalescing_manager` below): the captured
reduce-scatters are launched at exit with async_op=True, one per bucket, instead of one
`reduce_scatter_tensor_coalesced`; the lost work is the bug. Two gradient buckets; the optimizer step is an SGD update
of the local parameter shard.
RULE: an async collective (async_op=True) runs on the process group's internal NCCL stream; only `Work.wait()` makes
the current stream wait for it (torch.distributed docs, "Synchronous and asynchronous collective operations";
ProcessGroupNCCL). comm_stream never waited, so `main_stream.wait_stream(comm_stream)` orders nothing after the
reduce-scatter.
WHAT SIMDIST SAYS: read-after-write between the reduce-scatter writing `sync_grads_shard` (internal NCCL stream) and
the optimizer step reading it on the main stream.
"""
import contextlib
import os

import torch
import torch.distributed as dist

BUCKET = 4096        # elements per gradient bucket


class _CoalescingManager:                    # torch/distributed/distributed_c10d.py
    def __init__(self):
        self.works = []

    def append(self, work):
        if work:
            self.works.append(work)

    def wait(self):
        for work in self.works:
            work.wait()


_pg_coalesce_state = []                      # _world.pg_coalesce_state[group]


def reduce_scatter_tensor(output, input, async_op):
    """Inside a coalescing block the fast path only records the op (distributed_c10d.reduce_scatter_tensor)."""
    assert async_op
    _pg_coalesce_state.append((output, input))


@contextlib.contextmanager
def coalescing_manager(group, device, async_ops):
    """_coalescing_manager as torch 2.3 behaved with `device` given (issue 122807)."""
    cm = _CoalescingManager()
    yield cm
    op_list = list(_pg_coalesce_state)
    _pg_coalesce_state.clear()
    works = [dist.reduce_scatter_tensor(out, inp, group=group, async_op=async_ops) for out, inp in op_list]
    work = None                              # BUG: `if device: work = group._end_coalescing(device)` -> no work
    if async_ops:
        cm.append(work)                      # cm.works stays empty
    del works


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    device = torch.device("cuda", torch.cuda.current_device())
    group = dist.group.WORLD
    shard = BUCKET // world
    comm_stream = torch.cuda.Stream()                                      # self._comm_streams[...]
    params_shard = [torch.ones(shard, device="cuda") for _ in range(2)]    # this rank's parameter shards
    sync_grads_shard = [torch.empty(shard, device="cuda") for _ in range(2)]

    # backward fills the gradient buckets on the main stream
    grads_bucket = [torch.arange(BUCKET, device="cuda", dtype=torch.float32).mul_(b + 1).add_(rank)
                    for b in range(2)]

    # _start_bucket_grad_sync(buckets)
    main_stream = torch.cuda.current_stream()
    comm_stream.wait_stream(main_stream)
    with torch.cuda.stream(comm_stream):
        with coalescing_manager(group, device, async_ops=True) as cm:
            for b in range(2):
                reduce_scatter_tensor(sync_grads_shard[b], grads_bucket[b], async_op=True)
        cm.wait()                                                          # waits for nothing: cm.works == []

    # _finish_bucket_grad_sync(), then the optimizer step
    main_stream.wait_stream(comm_stream)
    for b in range(2):
        params_shard[b].sub_(sync_grads_shard[b], alpha=1e-3)
    sums = [round(p.sum().item(), 4) for p in params_shard]
    print(f"rank {rank}: cm.works={len(cm.works)} updated parameter shards {sums}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
