"""A side stream kept as its (stream_id, device_index, device_type) triple and rebuilt with
torch.cuda.Stream(stream_id=..., device_index=..., device_type=...) (how torch.cuda.current_stream() itself
builds its Python object, and how code that passes streams across an API boundary as plain ints gets them back):
the rebuilt object is the same stream, equal and of the same hash, so waiting on it orders the producer's work.

EXPECTED: clean
WORLD_SIZE: 1
REASON: torch/cuda/streams.py Stream.__new__: with stream_id and device_index in kwargs it wraps that existing stream (super().__new__(cls, priority=priority, **kwargs)); torch/_streambase / torch.Stream __eq__ and __hash__ compare (stream_id, device_index, device_type); a stream id of 0 is the default stream (c10/cuda/CUDAStream.cpp).
"""
import torch


def main():
    torch.cuda.set_device(0)
    side = torch.cuda.Stream()
    triple = (side.stream_id, side.device_index, side.device_type)
    again = torch.cuda.Stream(stream_id=triple[0], device_index=triple[1], device_type=triple[2])
    assert again == side and hash(again) == hash(side) and len({side, again}) == 1
    d = torch.cuda.default_stream()
    assert torch.cuda.Stream(stream_id=d.stream_id, device_index=d.device_index, device_type=d.device_type) == d

    x = torch.arange(1 << 16, dtype=torch.float32, device="cuda")
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        y = x * 3 + 1
    torch.cuda.current_stream().wait_stream(again)   # the rebuilt handle: the same stream
    y.record_stream(torch.cuda.current_stream())
    total = y.sum().item()
    n = 1 << 16
    assert total == 3 * (n - 1) * n / 2 + n, total


if __name__ == "__main__":
    main()
