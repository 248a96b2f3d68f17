"""I6 with torch's own `_coalescing_manager`: Apex DistributedFusedAdam's grad sync, driving the real manager.

EXPECTED: clean
INCIDENT: https://github.com/pytorch/pytorch/issues/122807 (fixed in torch by pull/122849 / pull/123170); plain-torch
model of the bug and the fix: tests/corpus/incidents/i06_torch_coalescing_manager_{bug,fix}.py.
MODELLED ON: apex/contrib/optimizers/distributed_fused_adam.py `_start_bucket_grad_sync` / `_finish_bucket_grad_sync`
(see the corpus program), calling torch.distributed.distributed_c10d._coalescing_manager(group, device,
async_ops=True) around `reduce_scatter_tensor(..., async_op=True)`, then `cm.wait()`.
SIMPLIFIED: two gradient buckets, an SGD step on the local shard. There is no real-library buggy twin: the bug
lived in torch's C++ (`ProcessGroupNCCL::endCoalescing` returned no work), fixed since torch 2.4.
RULE: `cm.wait()` waits for the coalesced work, which makes the current stream (comm_stream) wait for the
reduce-scatter (torch.distributed docs; distributed_c10d.py `_coalescing_manager`).
WHAT SIMDIST SAYS: clean (torch's own `_coalescing_manager` runs on simdist's process group; seeds 0-4); on a GPU
with torch >= 2.4 it is clean.
"""
import os

import torch
import torch.distributed as dist
from torch.distributed.distributed_c10d import _coalescing_manager

BUCKET = 4096


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    device = torch.device("cuda", torch.cuda.current_device())
    group = dist.group.WORLD
    shard = BUCKET // world
    comm_stream = torch.cuda.Stream()
    params_shard = [torch.ones(shard, device="cuda") for _ in range(2)]
    sync_grads_shard = [torch.empty(shard, device="cuda") for _ in range(2)]
    grads_bucket = [torch.arange(BUCKET, device="cuda", dtype=torch.float32).mul_(b + 1).add_(rank)
                    for b in range(2)]

    main_stream = torch.cuda.current_stream()
    comm_stream.wait_stream(main_stream)
    with torch.cuda.stream(comm_stream):
        with _coalescing_manager(group, device, async_ops=True) as cm:
            for b in range(2):
                dist.reduce_scatter_tensor(sync_grads_shard[b], grads_bucket[b], group=group, async_op=True)
        cm.wait()
    main_stream.wait_stream(comm_stream)
    for b in range(2):
        params_shard[b].sub_(sync_grads_shard[b], alpha=1e-3)
    print(f"rank {rank}: cm.works={len(cm.works)} updated parameter shards "
          f"{[round(p.sum().item(), 4) for p in params_shard]}")
    for b in range(2):
        full = sum(torch.arange(BUCKET, dtype=torch.float32) * (b + 1) + r for r in range(world))
        ref = 1 - 1e-3 * full[rank * shard:(rank + 1) * shard]
        assert torch.allclose(params_shard[b].cpu(), ref, atol=1e-5), f"bucket {b} wrong"
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
