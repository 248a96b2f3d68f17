"""The consumer stream waits on the event before the producer records it (calls out of order, e.g. a wait
hoisted above the producing branch): waiting on a not-yet-recorded event is a no-op, so the later record orders
nothing for the consumer, which races the producer.

EXPECTED: hazard
KINDS: read-after-write
WORLD_SIZE: 1
REASON: torch.cuda.Event.wait / Stream.wait_event: cudaStreamWaitEvent on an event that has not been recorded completes at once (CUDA Runtime API, cudaStreamWaitEvent; torch/cuda/streams.py Event.wait); the wait captures only what the event had recorded when it was called.
"""
import torch


def main():
    torch.cuda.set_device(0)
    side = torch.cuda.Stream()
    x = torch.randn(1 << 18, device="cuda")
    ready = torch.cuda.Event()
    side.wait_stream(torch.cuda.current_stream())
    torch.cuda.current_stream().wait_event(ready)      # BUG: nothing recorded yet: a no-op
    with torch.cuda.stream(side):
        y = x.sin()
        ready.record()
    z = y * 2
    y.record_stream(torch.cuda.current_stream())
    print(z.sum().item())


if __name__ == "__main__":
    main()
