"""Weights are broadcast from rank 0 with async_op=True and, before the work is waited, the next checkpoint shard is
copied host-to-device into the same buffer with a blocking copy_: the copy on the current stream is not ordered
against the broadcast on the NCCL stream (the host sync of the copy's stream says nothing about the NCCL stream).

EXPECTED: hazard
KINDS: write-after-read
KINDS_ALSO: write-after-write, read-after-write
MODELLED ON: streaming weight loaders that broadcast each loaded tensor from rank 0 and reuse one staging buffer for
the next tensor (e.g. `dist.broadcast(buf, src=0, async_op=True)` pipelined with the next `buf.copy_(cpu_tensor)` in
checkpoint-loading loops), with the `work.wait()` placed after the reuse.
REASON: torch.distributed docs ("Synchronous and asynchronous collective operations"): an async collective runs on
the NCCL stream and only work.wait() orders the current stream after it; a blocking copy_ (Copy.cu: cudaMemcpyAsync
on the current stream + stream_synchronize) is ordered on the current stream only.
"""
import os

import torch
import torch.distributed as dist

N = 1 << 16


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    shards = [torch.full((N,), float(i + 1)) for i in range(2)]         # rank 0's host checkpoint shards
    buf = torch.empty(N, device="cuda")
    outs = []
    if rank == 0:
        buf.copy_(shards[0])
    work = dist.broadcast(buf, src=0, async_op=True)
    if rank == 0:
        buf.copy_(shards[1])                           # BUG: the broadcast may still be reading buf
    work.wait()
    outs.append(buf.clone())
    print(f"rank {rank}: first broadcast sum {outs[0].sum().item()}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
