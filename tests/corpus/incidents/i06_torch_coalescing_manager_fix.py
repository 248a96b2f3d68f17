"""I6 PyTorch `_coalescing_manager(group, device, async_ops=True)`, fixed: the manager keeps the coalesced work,
so `cm.wait()` makes the comm stream wait for the reduce-scatter.

EXPECTED: clean
INCIDENT: https://github.com/pytorch/pytorch/issues/122807 (fixes pull/122849, pull/123170); twin of
i06_torch_coalescing_manager_bug.py (same program, the fix applied).
MODELLED ON: torch/distributed/distributed_c10d.py `_coalescing_manager` after the fix: the work of the launched
coalesced collective is what `cm.append(work)` receives, so `cm.works` is non-empty and `cm.wait()` calls
`work.wait()`; Apex's DistributedFusedAdam is unchanged.
SIMPLIFIED: as in the buggy twin (one work per captured reduce-scatter instead of one coalesced work).
RULE: `Work.wait()` on an async NCCL collective makes the current stream (here comm_stream) wait for it; the main
stream's `wait_stream(comm_stream)` then orders the optimizer after it (torch.distributed docs, "Synchronous and
asynchronous collective operations").
WHAT SIMDIST SAYS: clean; the program checks the updated parameter shards against the reduce-scatter computed on the
CPU. The same program driving torch's own `_coalescing_manager` is tests/corpus/incidents/i06_torch_coalescing_manager_real_fix.py.
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
    if async_ops:
        for work in works:                   # FIX: the launched collective's work is what the manager keeps
            cm.append(work)


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
        cm.wait()                                                          # comm_stream waits for the reduce-scatter

    # _finish_bucket_grad_sync(), then the optimizer step
    main_stream.wait_stream(comm_stream)
    for b in range(2):
        params_shard[b].sub_(sync_grads_shard[b], alpha=1e-3)
    sums = [round(p.sum().item(), 4) for p in params_shard]
    print(f"rank {rank}: cm.works={len(cm.works)} updated parameter shards {sums}")
    for b in range(2):                       # reference: reduce-scatter of every rank's bucket, on the CPU
        full = sum(torch.arange(BUCKET, dtype=torch.float32) * (b + 1) + r for r in range(world))
        ref = 1 - 1e-3 * full[rank * shard:(rank + 1) * shard]
        assert torch.allclose(params_shard[b].cpu(), ref, atol=1e-5), f"bucket {b} wrong"
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
