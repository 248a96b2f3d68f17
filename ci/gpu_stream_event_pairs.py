"""Which stream/event pairings order work on a GPU (notes L8): a producer on a side stream, delayed with
torch.cuda._sleep, records an event (torch.cuda.Event or the generic torch.Event); the default stream waits it
through the generic torch.Stream torch.accelerator hands out or through torch.cuda.Stream.wait_event (or not at
all), then reads the product. The caching allocator is first filled with NaN so an early read shows as a wrong value
(a right value proves nothing alone; a wrong one proves the wait did not order).

    python3 ci/gpu_stream_event_pairs.py        # on the GPU machine: one line per pairing, right/10

Measured on an H200, torch 2.11, 2026-12-02 (this script):
    event=cuda     waited by=generic  right 1/10
    event=cuda     waited by=cuda     right 10/10
    event=cuda     waited by=none     right 0/10
    event=generic  waited by=generic  right 10/10
    event=generic  waited by=cuda     right 10/10
    event=generic  waited by=none     right 10/10
So a torch.cuda.Event orders only through torch.cuda.Stream.wait_event (the no-wait control shows the early read);
waited by the generic stream it is as good as no wait. The generic-event rows say nothing about ordering: even with
no wait their values were right (something on the torch.Event path orders or synchronizes here; not investigated,
and simdist does not assume it: a generic event not waited is a race there, as the CUDA semantics say).
"""
import torch

N = 1 << 16


def dirty():
    junk = [torch.full((N,), float("nan"), device="cuda") for _ in range(64)]
    del junk


def probe(event_kind, waiter):
    dirty()
    x = torch.ones(N, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(20_000_000)
        y = x * 2
        ev = torch.cuda.Event() if event_kind == "cuda" else torch.Event(device="cuda")
        ev.record()
    if waiter == "generic":
        torch.accelerator.current_stream().wait_event(ev)
    elif waiter == "cuda":
        torch.cuda.current_stream().wait_event(ev)
    z = y + 1
    torch.cuda.synchronize()
    return z.sum().item() == 3.0 * N


if __name__ == "__main__":
    for event_kind in ("cuda", "generic"):
        for waiter in ("generic", "cuda", "none"):
            right = sum(probe(event_kind, waiter) for _ in range(10))
            print(f"event={event_kind:8s} waited by={waiter:8s} right {right}/10")
