"""The reduce stream reduce-scatters the gradients (async_op=True, joined with work.wait()), copies its shard into a
pinned host buffer with non_blocking=True and records an event; the CPU optimizer (ZeRO-Offload's CPU Adam) then
reads the pinned buffer on the host. The host waits with
`done.synchronize()` before the CPU step, which is then equal to the reference.

EXPECTED: clean
WORLD_SIZE: 2
MODELLED ON: ZeRO-Offload (DeepSpeed deepspeed/runtime/zero/stage3.py `__partition_grads`: the reduced
gradient partition copied into the CPU fp32 gradient with `copy_(..., non_blocking=True)` on the
reduce-and-partition stream, the CPU Adam step after the stream is synchronized), written by hand.
REASON: Event.synchronize blocks the host until the work captured by the event (the reduce-scatter, joined by
work.wait(), and the copy) has completed (torch/cuda/streams.py: cudaEventSynchronize).
"""
import os

import torch
import torch.distributed as dist

N, LR = 8192, 0.01


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    reduce_stream = torch.cuda.Stream()
    g = torch.Generator().manual_seed(rank)
    host_grad = torch.randn(N, generator=g)
    master = torch.zeros(N // world)                          # the CPU optimizer's fp32 master shard
    pinned = torch.empty(N // world).pin_memory()              # the offload buffer
    grad = host_grad.cuda() * 2.0                              # "backward" on the current stream
    shard = torch.empty(N // world, device="cuda")
    reduce_stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(reduce_stream):
        work = dist.reduce_scatter_tensor(shard, grad, async_op=True)
        work.wait()
        pinned.copy_(shard, non_blocking=True)                 # offload the reduced shard
        done = torch.cuda.Event()
        done.record()
    grad.record_stream(reduce_stream)
    del grad
    done.synchronize()
    master -= LR * pinned                                      # the CPU optimizer step reads the offload buffer
    want = sum(torch.randn(N, generator=torch.Generator().manual_seed(r)) * 2.0
               for r in range(world)).chunk(world)[rank]
    print(f"rank {rank}: CPU step equal to the reference: {torch.allclose(master, -LR * want, atol=1e-6)}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
