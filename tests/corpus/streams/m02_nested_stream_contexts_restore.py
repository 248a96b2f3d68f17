"""Nested torch.cuda.stream contexts (as FSDP's unshard inside a compute-stream context, and DeepSpeed's
reduction stream inside the backward): each exit restores the stream that was current at its entry,
torch.cuda.stream(None) is a no-op, torch.cuda.StreamContext is the same context manager; the work is chained
with wait_stream at each hand-off, so the values are right.

EXPECTED: clean
WORLD_SIZE: 1
REASON: torch/cuda/__init__.py StreamContext.__enter__ saves torch.cuda.current_stream() and __exit__ sets it back; stream(None) returns a StreamContext that does nothing (cur_stream is None); wait_stream orders all later work on the waiting stream after the work queued on the other (torch/cuda/streams.py).
"""
import torch


def main():
    torch.cuda.set_device(0)
    default = torch.cuda.current_stream()
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    a = torch.arange(4096, dtype=torch.float32)
    x = a.cuda()
    s1.wait_stream(default)
    with torch.cuda.stream(s1):
        assert torch.cuda.current_stream() == s1
        y = x * 2
        s2.wait_stream(s1)
        with torch.cuda.StreamContext(s2):
            assert torch.cuda.current_stream() == s2
            with torch.cuda.stream(None):
                assert torch.cuda.current_stream() == s2
                z = y + 1
            assert torch.cuda.current_stream() == s2
        assert torch.cuda.current_stream() == s1
        s1.wait_stream(s2)
        w = z * y
    assert torch.cuda.current_stream() == default
    default.wait_stream(s1)
    out = w - x
    for t in (y, z, w):
        t.record_stream(default)
    assert torch.equal(out.cpu(), (a * 2 + 1) * (a * 2) - a)


if __name__ == "__main__":
    main()
