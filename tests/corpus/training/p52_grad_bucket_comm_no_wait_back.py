"""Gradient bucket reduced on a comm stream; the default stream unflattens without waiting for the comm stream.

EXPECTED: hazard
KINDS: read-after-write
REASON: the (sync, torch>=2.8) all_reduce runs on the comm stream; the default stream's reads of the bucket are unordered with it.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    world = dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    grads = [torch.full((128, 64), float(rank + i), device="cuda") for i in range(3)]
    comm = torch.cuda.Stream()
    comm.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(comm):
        bucket = torch.cat([g.flatten() for g in grads])
        dist.all_reduce(bucket)
        bucket.div_(world)
    synced = []
    off = 0
    for g in grads:                        # BUG: no current_stream().wait_stream(comm)
        synced.append(bucket[off:off + g.numel()].view_as(g) * 1.0)
        off += g.numel()
    torch.cuda.synchronize()
    print([s[0, 0].item() for s in synced])
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
