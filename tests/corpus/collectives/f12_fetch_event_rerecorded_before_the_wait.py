"""One fetch event reused: three async all-gathers are issued one after the other on a fetch stream (each joined
there with work.wait()), and the same event is recorded after each, so it is recorded again twice before anyone
waits it. The consumer waits it once, after the third record, and then reads all three gathered buffers.

EXPECTED: clean
WORLD_SIZE: 2
MODELLED ON: DeepSpeed ZeRO-3's fetch events (deepspeed/runtime/zero/partitioned_param_coordinator.py: an event
recorded on the all-gather stream after each fetch, waited by the consumer) reduced to one event object reused
for every fetch, as hand-written prefetchers often keep it.
REASON: cudaStreamWaitEvent waits for the event's latest record at the time of the call (torch/cuda/streams.py
Stream.wait_event); that record was made after the third gather was joined on the fetch stream, and the first
two gathers were joined earlier on the same stream, so all three precede the reads (over-waiting, not a race).
"""
import os

import torch
import torch.distributed as dist

N, ROUNDS = 4096, 3


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    fetch_stream = torch.cuda.Stream()
    fetched = torch.cuda.Event()                 # one event for every fetch, recorded again each time
    shards = [torch.full((N,), float(10 * r + rank), device="cuda") for r in range(ROUNDS)]
    bufs = [torch.empty(world * N, device="cuda") for _ in range(ROUNDS)]
    fetch_stream.wait_stream(torch.cuda.current_stream())
    sums = []
    for r in range(ROUNDS):
        fetch(fetch_stream, fetched, bufs[r], shards[r])
    torch.cuda.current_stream().wait_event(fetched)
    sums = [b.sum() for b in bufs]
    want = [sum(float(10 * r + q) for q in range(world)) * N for r in range(ROUNDS)]
    got = [float(s) for s in sums]
    print(f"rank {rank}: sums {got} want {want}")
    assert got == want
    dist.destroy_process_group()


def fetch(fetch_stream, fetched, buf, shard):
    with torch.cuda.stream(fetch_stream):
        work = dist.all_gather_into_tensor(buf, shard, async_op=True)
        work.wait()
        fetched.record()


if __name__ == "__main__":
    main()
