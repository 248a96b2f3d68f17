"""A checkpoint gather to rank 0: every rank's parameter shard gathered with an async dist.gather, and rank 0 copies
the gathered shards to the host (`.cpu()`) for saving before work.wait().

EXPECTED: hazard
KINDS: host-read
MODELLED ON: hand-written state-dict consolidation before torch.distributed.checkpoint (gather shards to rank 0,
`{k: v.cpu() for ...}`, torch.save), overlapped with the next shard's gather.
REASON: the async gather writes the gather_list on the NCCL stream; `.cpu()` copies on the current stream and
synchronizes only it (torch.distributed docs, async_op=True: use the outputs only after work.wait()).
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    shard = torch.full((1 << 14,), float(rank), device="cuda")
    gl = [torch.empty_like(shard) for _ in range(world)] if rank == 0 else None
    work = dist.gather(shard, gl, dst=0, async_op=True)
    if rank == 0:
        saved = {f"shard{r}": t.cpu() for r, t in enumerate(gl)}   # BUG: before work.wait()
        print(sorted(saved))
    work.wait()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
