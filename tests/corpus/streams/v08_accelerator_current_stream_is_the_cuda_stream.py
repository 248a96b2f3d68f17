"""Device-generic stream code (torch.accelerator, torch.Event: FSDP2's `torch.accelerator.current_stream()
.wait_event(event)`, DDP's `event.wait(stream=torch.accelerator.current_stream())`) mixed with torch.cuda streams
and events: inside `torch.cuda.stream(side)` the accelerator's current stream names the side stream (a generic
torch.Stream with its id, not equal to the torch.cuda.Stream object: measured on an H200), the default
stream's handle waits for a torch.cuda.Event, a torch.Event waits into a torch.cuda.Stream, and
torch.accelerator.set_stream makes a CUDA stream current; every producer is ordered before its consumer.

EXPECTED: clean
WORLD_SIZE: 1
REASON: torch/accelerator/__init__.py current_stream / set_stream over torch._C._accelerator_getStream / _accelerator_setStream (the device's current c10::Stream: on CUDA the stream torch.cuda.current_stream() names; torch.cuda.Stream is a torch.Stream); torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py:777, torch/nn/parallel/distributed.py:1353 (torch 2.13).
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
    torch.accelerator.current_stream().wait_event(ev)         # FSDP2's form
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
    assert z.sum().item() == 3.0 * n and w.sum().item() == 9.0 * n and v.sum().item() == 8.0 * n


if __name__ == "__main__":
    main()
