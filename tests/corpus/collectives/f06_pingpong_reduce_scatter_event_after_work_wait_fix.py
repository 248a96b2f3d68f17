"""The fix of f05: the reduce stream joins each async reduce-scatter (`work.wait()` inside the reduce stream's
context) before the buffer's event is recorded, so the event marks the collective's end; the current stream
waits it before refilling the buffer. Each buffer's event is made once and recorded again at every use, across
buckets and iterations (a wait captures the latest record at the call: the previous bucket's of that buffer).
The shards are checked against the sums of every rank's gradients.

EXPECTED: clean
WORLD_SIZE: 2
MODELLED ON: DeepSpeed ZeRO's partitioned gradient reduction (deepspeed/runtime/zero/stage3.py
`__add_grad_to_ipg_bucket` / `__reduce_and_partition_ipg_grads` on `self.reduce_and_partition_stream`, and
stage_1_and_2.py's ping-pong `IPGBucket.buffer` with `reduce_scatter`), with the buffers' reuse guarded by one
event per buffer made once and recorded again at every use, as hand-written overlap code (and DeepSpeed's
`__ongoing_fetch_events`) does.
REASON: Work.wait() makes the reduce stream wait the collective's end event (ProcessGroupNCCL.cpp
WorkNCCL::synchronizeStream), the event recorded after it on the reduce stream then covers the reduce-scatter's
read of the buffer, and the current stream's wait_event before the refill orders the overwrite after it.
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
                work.wait()                      # the reduce stream joins the collective
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
            assert ok, (it, b)
    print(f"rank {rank}: {ITERS} iterations of bucketed reduce-scatter done")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
