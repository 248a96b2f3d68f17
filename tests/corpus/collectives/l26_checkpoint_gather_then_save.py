"""The fix of l25: the async gather is waited before the host copies; the consolidated state dict, round-tripped
through torch.save / torch.load, equals every rank's shard; scatter back from rank 0 for a resume.

EXPECTED: clean
WORLD_SIZE: 3
MODELLED ON: state-dict consolidation to rank 0 and its reload (gather to dst=0, torch.save, scatter from src=0).
REASON: work.wait() orders the current stream after the gather (torch.distributed docs, async_op=True); the
synchronous scatter is ordered on the current stream.
"""
import io
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    shard = torch.arange(6, dtype=torch.float32, device="cuda") + 10 * rank
    gl = [torch.empty_like(shard) for _ in range(world)] if rank == 0 else None
    work = dist.gather(shard, gl, dst=0, async_op=True)
    work.wait()
    buf = io.BytesIO()
    if rank == 0:
        torch.save({f"shard{r}": t.cpu() for r, t in enumerate(gl)}, buf)
        buf.seek(0)
        sd = torch.load(buf)
        for r in range(world):
            assert torch.equal(sd[f"shard{r}"], torch.arange(6, dtype=torch.float32) + 10 * r)
    back = torch.empty(6, device="cuda")
    dist.scatter(back, [sd[f"shard{r}"].cuda() * 2 for r in range(world)] if rank == 0 else None, src=0)
    assert torch.equal(back.cpu(), (torch.arange(6, dtype=torch.float32) + 10 * rank) * 2)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
