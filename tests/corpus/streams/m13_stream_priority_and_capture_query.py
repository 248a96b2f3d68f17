"""High-priority communication streams (torch.cuda.Stream(priority=-1), as FSDP2 and DeepSpeed make them) and
library guards that ask torch.cuda.is_current_stream_capturing() (optimizers, TransformerEngine, Megatron's
CUDA-graph checks) outside any capture: the priority is kept, the query says False, values are unaffected.

EXPECTED: clean
WORLD_SIZE: 1
REASON: torch/cuda/streams.py Stream(priority=...) and Stream.priority; torch/cuda/graphs.py is_current_stream_capturing: True only while a CUDA graph capture is underway on the current stream.
"""
import torch


def main():
    torch.cuda.set_device(0)
    hi = torch.cuda.Stream(priority=-1)
    assert hi.priority == -1, hi.priority
    assert torch.cuda.Stream().priority == 0
    assert torch.cuda.is_current_stream_capturing() is False
    x = torch.ones(16, device="cuda")
    hi.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(hi):
        assert torch.cuda.is_current_stream_capturing() is False
        y = x + 1
    torch.cuda.current_stream().wait_stream(hi)
    y.record_stream(torch.cuda.current_stream())
    assert torch.equal(y.cpu(), torch.full((16,), 2.0))


if __name__ == "__main__":
    main()
