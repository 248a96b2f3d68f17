"""Gradient bucket all_reduced asynchronously on a dedicated comm stream, properly waited, unflattened on default.

EXPECTED: clean
REASON: comm.wait_stream(default) before flatten; work.wait() inside the comm context orders comm after NCCL; default.wait_stream(comm) before unflatten.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    world = dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    grads = [torch.randn(64, 64, device="cuda") * 0 + (rank + 1) * (i + 1) for i in range(4)]
    comm = torch.cuda.Stream()
    comm.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(comm):
        bucket = torch.cat([g.reshape(-1) for g in grads])
        work = dist.all_reduce(bucket, async_op=True)
        work.wait()
        bucket.div_(world)
    torch.cuda.current_stream().wait_stream(comm)
    off = 0
    for g in grads:
        n = g.numel()
        g.copy_(bucket[off:off + n].view_as(g))
        off += n
    mean = sum(r + 1 for r in range(world)) / world
    for i, g in enumerate(grads):
        assert torch.allclose(g, torch.full_like(g, mean * (i + 1))), (i, g)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
