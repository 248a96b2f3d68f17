"""Nested stream contexts, current_stream restoration, Event.wait(stream) API, default_stream().

EXPECTED: clean
REASON: each cross-stream dependency is covered by an event or wait_stream; the context manager restores the previous stream.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    s1 = torch.cuda.Stream()
    s2 = torch.cuda.Stream(priority=-1)
    default = torch.cuda.current_stream()
    assert default == torch.cuda.default_stream()
    a = torch.arange(10, dtype=torch.float32, device="cuda")
    s1.wait_stream(default)
    with torch.cuda.stream(s1):
        assert torch.cuda.current_stream() == s1
        b = a * 2
        e1 = torch.cuda.Event()
        e1.record()
        with torch.cuda.stream(s2):
            assert torch.cuda.current_stream() == s2
            e1.wait()                      # s2 waits for b
            c = b + 1
            e2 = torch.cuda.Event()
            e2.record(s2)
        assert torch.cuda.current_stream() == s1
        e2.wait(s1)
        d = c * b
    assert torch.cuda.current_stream() == default
    default.wait_stream(s1)
    ref = (torch.arange(10.) * 2 + 1) * (torch.arange(10.) * 2)
    assert d.tolist() == ref.tolist(), d.tolist()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
