"""Partitioned gradient reduction with a ping-pong pair of flat buffers: backward copies each bucket's gradients
into one buffer on the current stream, the reduce stream reduce-scatters it into the bucket's shard with
async_op=True, and the next bucket goes to the other buffer. Each buffer has one event, made once and recorded
again every time the buffer is reduced; before a buffer is refilled the current stream waits its event (the
first wait of each buffer is on a never-recorded event: a no-op). BUG: the event is recorded on the reduce
stream right after the async reduce-scatter is issued, without `work.wait()`: the collective runs on
ProcessGroupNCCL's internal stream, so the event covers nothing of it, and the third bucket's copy overwrites
buffer 0 while the first reduce-scatter may still read it.

EXPECTED: hazard
KINDS: write-after-read
KINDS_ALSO: read-after-write, write-after-write
WORLD_SIZE: 2
MODELLED ON: DeepSpeed ZeRO's partitioned gradient reduction (deepspeed/runtime/zero/stage3.py
`__add_grad_to_ipg_bucket` / `__reduce_and_partition_ipg_grads` on `self.reduce_and_partition_stream`, and
stage_1_and_2.py's ping-pong `IPGBucket.buffer` with `reduce_scatter`), with the buffers' reuse guarded by one
event per buffer made once and recorded again at every use, as hand-written overlap code (and DeepSpeed's
`__ongoing_fetch_events`) does.
RULE: cudaEventRecord captures the work queued on the stream it is recorded on (torch/cuda/streams.py
Event.record); an async collective's kernels are on the internal NCCL stream, which the caller's stream joins
only by Work.wait() (ProcessGroupNCCL.cpp WorkNCCL::synchronizeStream). Waiting a never-recorded event is a
no-op (cudaStreamWaitEvent), and a wait captures the event's latest record at the time of the call.
"""
import os

import torch
import torch.distributed as dist

PARAMS, N, PER_BUCKET, ITERS = 6, 4096, 2, 2


def grad_of(it, p, rank):
    g = torch.Generator().manual_seed(1000 * it + 10 * p + rank)
    return torch.randn(N, generator=g)


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    reduce_stream = torch.cuda.Stream()
    bufs = [torch.empty(PER_BUCKET * N, device="cuda") for _ in range(2)]        # the ping-pong pair
    events = [torch.cuda.Event() for _ in range(2)]                              # made once, recorded again
    host_grads = {(it, p, r): grad_of(it, p, r) for it in range(ITERS) for p in range(PARAMS) for r in range(world)}
    for it in range(ITERS):
        shards = [torch.empty(PER_BUCKET * N // world, device="cuda") for _ in range(PARAMS // PER_BUCKET)]
        works = []
        for b in range(PARAMS // PER_BUCKET):
            k = b % 2
            torch.cuda.current_stream().wait_event(events[k])   # the buffer's last reduce has read it
            for j in range(PER_BUCKET):                         # "backward" produces the bucket's gradients
                p = b * PER_BUCKET + j
                grad = host_grads[it, p, rank].cuda() * 1.0
                bufs[k][j * N:(j + 1) * N].copy_(grad)
            reduce_stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(reduce_stream):
                work = dist.reduce_scatter_tensor(shards[b], bufs[k], async_op=True)
                events[k].record()
            works.append(work)
        for work in works:
            work.wait()
        torch.cuda.current_stream().wait_stream(reduce_stream)
        for b in range(PARAMS // PER_BUCKET):
            flat = torch.cat([sum(host_grads[it, b * PER_BUCKET + j, r] for r in range(world))
                              for j in range(PER_BUCKET)])
            want = flat.chunk(world)[rank]
            ok = torch.allclose(shards[b].cpu(), want, rtol=1e-6, atol=1e-6)
            print(f"rank {rank} iteration {it} bucket {b}: shard equal to the sum: {ok}")
    print(f"rank {rank}: {ITERS} iterations of bucketed reduce-scatter done")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
