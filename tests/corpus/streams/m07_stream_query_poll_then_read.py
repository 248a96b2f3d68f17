"""Like m06 but the host polls stream.query() on the copy stream, then reads the pinned buffer; a second
buffer refilled after the poll is read only after stream.synchronize().

EXPECTED: clean
WORLD_SIZE: 1
REASON: torch.cuda.Stream.query(): True when all work submitted to the stream has completed (cudaStreamQuery); Stream.synchronize() waits for it (torch/cuda/streams.py).
"""
import torch


def main():
    torch.cuda.set_device(0)
    a = torch.randn(1 << 14)
    x = a.cuda() + 1
    buf = torch.empty(1 << 14, pin_memory=True)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        buf.copy_(x, non_blocking=True)
    while not side.query():
        pass
    assert torch.equal(buf, a + 1)
    with torch.cuda.stream(side):
        y = x * 3
        buf.copy_(y, non_blocking=True)
    x.record_stream(side)
    side.synchronize()
    assert torch.equal(buf, (a + 1) * 3)


if __name__ == "__main__":
    main()
