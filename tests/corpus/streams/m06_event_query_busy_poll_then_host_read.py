"""Non-blocking D2H copy into a pinned buffer on a side stream, an event recorded after it, the host spins on
event.query() (the pattern of asynchronous checkpoint savers and logging of metrics) and then reads the buffer.

EXPECTED: clean
WORLD_SIZE: 1
REASON: torch.cuda.Event.query() returns True only when all work captured by the event has completed (cudaEventQuery == cudaSuccess), so the host's later read happens after the copy.
"""
import torch


def main():
    torch.cuda.set_device(0)
    a = torch.randn(1 << 15)
    x = a.cuda() * 2
    buf = torch.empty(1 << 15, pin_memory=True)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    done = torch.cuda.Event()
    with torch.cuda.stream(side):
        buf.copy_(x, non_blocking=True)
        done.record()
    x.record_stream(side)
    polls = 0
    while not done.query():
        polls += 1
    assert torch.equal(buf, a * 2)


if __name__ == "__main__":
    main()
