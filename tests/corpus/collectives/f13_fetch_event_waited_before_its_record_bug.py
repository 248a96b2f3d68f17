"""One fetch event reused, the waiter too early: each round the consumer waits the event and then reads the
round's gathered buffer, but the round's fetch is issued (and the event recorded again) only after the wait.
The first round's wait is on a never-recorded event (a no-op) and every later wait captures the previous round's
record, so each read races the gather writing its buffer.

EXPECTED: hazard
KINDS: read-after-write
WORLD_SIZE: 2
MODELLED ON: DeepSpeed ZeRO-3's fetch events (deepspeed/runtime/zero/partitioned_param_coordinator.py: an event
recorded on the all-gather stream after each fetch, waited by the consumer) reduced to one event object reused
for every fetch, as hand-written prefetchers often keep it.
RULE: Stream.wait_event captures the event's most recent record at the time of the call; a record made later is
not waited (cudaStreamWaitEvent; waiting a never-recorded event completes at once).
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
        torch.cuda.current_stream().wait_event(fetched)   # BUG: before this round's record
        fetch(fetch_stream, fetched, bufs[r], shards[r])
        sums.append(bufs[r].sum())
    want = [sum(float(10 * r + q) for q in range(world)) * N for r in range(ROUNDS)]
    got = [float(s) for s in sums]
    print(f"rank {rank}: sums {got} want {want}")
    dist.destroy_process_group()


def fetch(fetch_stream, fetched, buf, shard):
    with torch.cuda.stream(fetch_stream):
        work = dist.all_gather_into_tensor(buf, shard, async_op=True)
        work.wait()
        fetched.record()


if __name__ == "__main__":
    main()
