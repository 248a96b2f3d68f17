"""Device-generic stream code (torch.accelerator, torch.Event: DDP's `event.wait(stream=torch.accelerator
.current_stream())`) mixed with torch.cuda streams and events: inside `torch.cuda.stream(side)` the accelerator's
current stream names the side stream (a generic torch.Stream with its id, not equal to the torch.cuda.Stream
object: measured on an H200), a torch.Event waits into a torch.cuda.Stream, and torch.accelerator.set_stream makes
a CUDA stream current; those are ordered. One is not: the generic stream's `wait_event` of a torch.cuda.Event
(the form of FSDP2's _fsdp_param_group.py:777, whose event comes from a torch.cuda.Stream's record_event) orders
nothing, so `z = y + 1` may read y before the side stream wrote it.

EXPECTED: hazard
KINDS: read-after-write
WORLD_SIZE: 1
REASON: torch/accelerator/__init__.py current_stream / set_stream over torch._C._accelerator_getStream / _accelerator_setStream (the device's current c10::Stream: on CUDA the stream torch.cuda.current_stream() names; torch.cuda.Stream is a torch.Stream); torch/csrc/Stream.cpp THPStream_wait_event casts its argument to a THPEvent unchecked, and a torch.cuda.Event (THCPEvent : THPEvent) records only its own cuda_event, so the torch.Event part it waits on was never recorded: c10 InlineEvent::block returns at once. On an H200 (torch 2.11) this program failed its value check in the slow-side pass (2026-12-02), and the wait alone let a delayed producer be read early in 19 of 20 runs (notes L8).
"""
import torch


def main():
    torch.cuda.set_device(0)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        acc = torch.accelerator.current_stream()
        # a generic torch.Stream naming the side stream: the same id triple, yet unequal to the torch.cuda.Stream
        # either way round and of another hash (measured on an H200, torch 2.11); equal to another torch.Stream
        assert type(acc) is not type(side) and isinstance(acc, torch.Stream)
        assert acc.stream_id == side.stream_id and acc.device_index == side.device_index
        assert not (acc == side) and not (side == acc)
        assert not (acc != side) and not (side != acc)   # != is torch.Stream's id comparison: not "unequal" either
        assert acc == torch.accelerator.current_stream()
    d = torch.accelerator.current_stream()
    assert d.stream_id == torch.cuda.default_stream().stream_id and not d == torch.cuda.default_stream()

    n = 1 << 16
    x = torch.ones(n, device="cuda")
    side.wait_stream(torch.accelerator.current_stream())
    with torch.cuda.stream(side):
        y = x * 2
        ev = torch.cuda.Event()
        ev.record()
    torch.accelerator.current_stream().wait_event(ev)         # BUG: a generic stream's wait of a torch.cuda.Event
    z = y + 1

    gev = torch.Event(device="cuda")
    side.wait_stream(torch.accelerator.current_stream())       # z is the default stream's
    with torch.cuda.stream(side):
        w = z * 3
        gev.record()
    gev.wait(stream=torch.accelerator.current_stream())        # DDP's form
    y.record_stream(torch.accelerator.current_stream())

    torch.accelerator.set_stream(side)
    assert torch.cuda.current_stream() == side
    v = w - 1                                                  # on side, after w in stream order
    torch.accelerator.set_stream(torch.cuda.default_stream())
    torch.accelerator.current_stream().wait_stream(side)
    # 3, 9, 8 when ordered; 1, 3, 2 (or garbage) when z read y early, as on the H200's slow-side pass
    print("z w v per element:", z.sum().item() / n, w.sum().item() / n, v.sum().item() / n)


if __name__ == "__main__":
    main()
