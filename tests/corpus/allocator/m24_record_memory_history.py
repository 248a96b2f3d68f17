"""The memory-snapshot workflow (https://pytorch.org/docs/stable/torch_cuda_memory.html):
torch.cuda.memory._record_memory_history(), some allocations, torch.cuda.memory._snapshot(); either it works and
the snapshot lists the segments, or simdist refuses it by name.

EXPECTED: clean-or-error
ERROR: UnsupportedOperation
WORLD_SIZE: 1
REASON: torch/cuda/memory.py _record_memory_history / _snapshot: the allocator's history and segment snapshot (no effect on values).
"""
import torch


def main():
    torch.cuda.set_device(0)
    torch.cuda.memory._record_memory_history(max_entries=1000)
    x = torch.randn(1024, device="cuda")
    y = x * 2
    snap = torch.cuda.memory._snapshot()
    assert snap["segments"], snap
    torch.cuda.memory._record_memory_history(enabled=None)
    assert torch.allclose(y.cpu(), x.cpu() * 2)


if __name__ == "__main__":
    main()
