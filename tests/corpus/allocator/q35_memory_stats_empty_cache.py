"""memory_allocated / memory_reserved deltas follow the caching allocator: 512-byte rounding, 2 MiB small-pool
segments (<= 1 MiB requests), 20 MiB large segments for 1-10 MiB requests; free keeps memory reserved until
empty_cache().

EXPECTED: clean
WORLD_SIZE: 1
REASON: c10/cuda/CUDACachingAllocator.cpp (kMinBlockSize 512, kSmallSize 1 MiB, kSmallBuffer 2 MiB, kLargeBuffer 20 MiB, kMinLargeAlloc 10 MiB, kRoundLarge 2 MiB).
"""
import torch

MiB = 1 << 20


def main():
    torch.cuda.set_device(0)
    torch.cuda.empty_cache()
    a0, r0 = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
    t = torch.empty(25, dtype=torch.float32, device="cuda")          # 100 B -> 512 B block
    assert torch.cuda.memory_allocated() - a0 == 512, torch.cuda.memory_allocated() - a0
    assert torch.cuda.memory_reserved() - r0 == 2 * MiB, torch.cuda.memory_reserved() - r0
    big = torch.empty(4 * MiB, dtype=torch.uint8, device="cuda")     # 4 MiB -> large pool, 20 MiB segment
    assert torch.cuda.memory_allocated() - a0 == 512 + 4 * MiB
    assert torch.cuda.memory_reserved() - r0 == 22 * MiB, (torch.cuda.memory_reserved() - r0) / MiB
    huge = torch.empty(11 * MiB, dtype=torch.uint8, device="cuda")   # fits the 16 MiB remainder of the 20 MiB segment
    assert torch.cuda.memory_reserved() - r0 == 22 * MiB, (torch.cuda.memory_reserved() - r0) / MiB
    huge2 = torch.empty(11 * MiB, dtype=torch.uint8, device="cuda")  # 5 MiB left: new segment, >= 10 MiB -> 12 MiB
    assert torch.cuda.memory_reserved() - r0 == 34 * MiB, (torch.cuda.memory_reserved() - r0) / MiB
    del big, huge, huge2
    assert torch.cuda.memory_allocated() - a0 == 512
    assert torch.cuda.memory_reserved() - r0 == 34 * MiB
    torch.cuda.empty_cache()
    assert torch.cuda.memory_reserved() - r0 == 2 * MiB               # the small segment still holds t
    del t
    torch.cuda.empty_cache()
    assert torch.cuda.memory_allocated() == a0 and torch.cuda.memory_reserved() == r0
    assert torch.cuda.max_memory_allocated() >= 512 + 26 * MiB


if __name__ == "__main__":
    main()
