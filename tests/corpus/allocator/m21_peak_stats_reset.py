"""Peak-memory bookkeeping as training scripts log it (torchtitan's and Lightning's memory monitors):
max_memory_allocated follows the largest live set, max_memory_reserved keeps its peak after empty_cache() has
returned the segments, reset_peak_memory_stats() brings both peaks down to the current figures, and
memory_stats() reports the same numbers under its keys, with allocation.all.current the blocks alive now.

EXPECTED: clean
WORLD_SIZE: 1
REASON: c10/cuda/CUDACachingAllocator.cpp: stats allocated_bytes / reserved_bytes each keep current and peak (update_stat), resetPeakStats sets peak = current; torch/cuda/memory.py max_memory_reserved reads reserved_bytes.all.peak, memory_allocated allocated_bytes.all.current; allocation.all.current counts live blocks; 4 MiB requests take a 20 MiB large segment (kLargeBuffer).
"""
import torch

MiB = 1 << 20


def main():
    torch.cuda.set_device(0)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    a0, r0 = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
    n0 = torch.cuda.memory_stats()["allocation.all.current"]
    blocks = [torch.empty(MiB, dtype=torch.float32, device="cuda") for _ in range(3)]   # 4 MiB each
    assert torch.cuda.memory_allocated() - a0 == 12 * MiB
    assert torch.cuda.memory_stats()["allocation.all.current"] - n0 == 3
    peak_res = torch.cuda.memory_reserved()
    assert peak_res - r0 == 20 * MiB, (peak_res - r0) / MiB
    del blocks
    assert torch.cuda.memory_allocated() == a0
    assert torch.cuda.max_memory_allocated() - a0 == 12 * MiB
    assert torch.cuda.memory_stats()["allocation.all.current"] == n0
    torch.cuda.empty_cache()
    assert torch.cuda.memory_reserved() == r0
    assert torch.cuda.max_memory_reserved() == peak_res, (torch.cuda.max_memory_reserved(), peak_res)
    st = torch.cuda.memory_stats()
    assert st["reserved_bytes.all.peak"] == peak_res and st["reserved_bytes.all.current"] == r0
    assert st["allocated_bytes.all.peak"] - a0 == 12 * MiB
    torch.cuda.reset_peak_memory_stats()
    assert torch.cuda.max_memory_allocated() == a0
    assert torch.cuda.max_memory_reserved() == r0
    small = torch.ones(100, device="cuda")          # 400 B -> one 512 B block
    assert torch.cuda.max_memory_allocated() - a0 == 512
    assert small.sum().item() == 100


if __name__ == "__main__":
    main()
