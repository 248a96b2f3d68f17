"""The input of an async all_gather_into_tensor was made on a side stream and dropped before `work.wait()`; wait()
unstashes it, its block goes back to the side stream's pool, and the side stream's next allocation reuses it while
the gather (on the NCCL stream, ordered only before the default stream) may still be reading it.

EXPECTED: hazard
KINDS: reuse-after-free
KINDS_ALSO: write-after-read, read-after-write, write-after-write
NCCL: 2.8
MODELLED ON: FSDP-style parameter prefetch that casts the local shard on a copy stream (mixed precision) and hands
it to an async all-gather issued from the default stream (torch/distributed/fsdp/_flat_param.py pre-unshard on
`_default_stream`/`unshard_stream`), dropping the cast shard after the issue; torch 2.8+ no longer record_streams it.
REASON: ProcessGroupNCCL (torch >= 2.8) stashes an async collective's tensors in the Work instead of calling
recordStream; WorkNCCL::synchronizeStream blocks the current stream on the end event and then
`stashed_for_allocator_safety_->unstash()` ("THIS MUST HAPPEN AFTER THE BLOCKING CALL ABOVE": safe only for blocks of
the current stream). The caching allocator hands a freed block to the next allocation on its own stream at once
(c10/cuda/CUDACachingAllocator.cpp free_block; torch.Tensor.record_stream docs). The side stream never waited for
the NCCL stream.
"""
import os

import torch
import torch.distributed as dist

N = 1 << 16


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    master = torch.full((N,), float(rank + 1), device="cuda")
    copy_stream = torch.cuda.Stream()
    copy_stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(copy_stream):
        shard = master.to(torch.bfloat16)                  # cast on the copy stream: its block is copy_stream's
    torch.cuda.current_stream().wait_stream(copy_stream)
    full = torch.empty(world * N, dtype=torch.bfloat16, device="cuda")
    work = dist.all_gather_into_tensor(full, shard, async_op=True)
    del shard                                              # BUG: no shard.record_stream(current stream)
    work.wait()                                            # unstashes the shard: its block is free on copy_stream
    with torch.cuda.stream(copy_stream):
        nxt = master.mul(2).to(torch.bfloat16)             # next layer's cast reuses the block
    torch.cuda.current_stream().wait_stream(copy_stream)
    want = torch.cat([torch.full((N,), float(r + 1)) for r in range(world)])
    print(f"rank {rank}: gather right: {torch.equal(full.float().cpu(), want)}, "   # may be wrong: the race
          f"next cast right: {torch.equal(nxt.float().cpu(), torch.full((N,), 2.0 * (rank + 1)))}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
