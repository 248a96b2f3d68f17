"""The reduce stream reduce-scatters the gradients (async_op=True, joined with work.wait()), copies its shard into a
pinned host buffer with non_blocking=True and records an event; the CPU optimizer (ZeRO-Offload's CPU Adam) then
reads the pinned buffer on the host. The host polls the event with
`while not done.query(): pass` (a non-blocking progress check, as an offload engine overlapping CPU work would),
then runs the CPU step, and afterwards a kernel on the current stream reads the reduced shard with no
wait_event: both come after the poll saw the event complete.

EXPECTED: clean
WORLD_SIZE: 2
MODELLED ON: ZeRO-Offload (DeepSpeed deepspeed/runtime/zero/stage3.py `__partition_grads`: the reduced
gradient partition copied into the CPU fp32 gradient with `copy_(..., non_blocking=True)` on the
reduce-and-partition stream, the CPU Adam step after the stream is synchronized), written by hand.
REASON: Event.query() returns True only when all work the event captured has completed (cudaEventQuery ==
cudaSuccess, torch/cuda/streams.py); the host's later reads, and every kernel it launches later on any stream,
come after that completion.
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
    while not done.query():
        pass
    master -= LR * pinned                                      # the CPU optimizer step reads the offload buffer
    norm = shard.norm()                                         # launched after the poll saw it done
    assert torch.allclose(norm.cpu(), (pinned.norm()), rtol=1e-5)
    want = sum(torch.randn(N, generator=torch.Generator().manual_seed(r)) * 2.0
               for r in range(world)).chunk(world)[rank]
    print(f"rank {rank}: CPU step equal to the reference: {torch.allclose(master, -LR * want, atol=1e-6)}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
