"""Exact caching-allocator figures through splits, merges and best fit, on a fresh stream (so no block cached
before the program is a candidate): three 6 MiB blocks share a 20 MiB segment, a fourth opens another; freeing
two neighbours merges them into 12 MiB; an 11 MiB request takes that 12 MiB block whole (its 1 MiB remainder is
not more than 1 MiB, so no split) and memory_allocated grows by 12 MiB, not 11; a 1.5 MiB request takes the 2 MiB
tail whole; a 100 KiB one opens a 2 MiB small-pool segment; empty_cache releases only the segment left wholly free.

EXPECTED: clean
WORLD_SIZE: 1
REASON: c10/cuda/CUDACachingAllocator.cpp: get_allocation_size (<= 1 MiB: 2 MiB small segment; < 10 MiB: 20 MiB; else rounded to 2 MiB), get_free_block (best fit by (stream, size, address) in the block's pool), should_split (large pool: remaining > kSmallSize = 1 MiB), free_block merges free neighbours, allocated_bytes counts block->size, release_cached_blocks frees only unsplit free blocks (whole segments).
"""
import torch

MiB = 1 << 20


def main():
    torch.cuda.set_device(0)
    torch.cuda.empty_cache()
    fresh = torch.cuda.Stream()
    a0, r0 = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
    torch.cuda.reset_peak_memory_stats()

    def alloc(nbytes):
        return torch.empty(nbytes, dtype=torch.uint8, device="cuda")

    def figures():
        return (torch.cuda.memory_allocated() - a0) / MiB, (torch.cuda.memory_reserved() - r0) / MiB

    with torch.cuda.stream(fresh):
        a, b, c = alloc(6 * MiB), alloc(6 * MiB), alloc(6 * MiB)
        assert figures() == (18, 20), figures()
        d = alloc(6 * MiB)
        assert figures() == (24, 40), figures()
        del a, b                                   # neighbours: one free 12 MiB block
        e = alloc(11 * MiB)                        # best fit: the 12 MiB block (not the 14 MiB tail), unsplit
        assert figures() == (24, 40), figures()     # c, d and the 12 MiB block
        f = alloc(3 * MiB // 2)                    # the 2 MiB tail after c, unsplit
        assert figures() == (26, 40), figures()
        g = alloc(100 * 1024)                      # small pool: a 2 MiB segment of its own
        assert figures() == (26 + 100 / 1024, 42), figures()
        torch.cuda.empty_cache()                   # nothing wholly free yet
        assert figures()[1] == 42
        del d                                      # its segment is wholly free now
        torch.cuda.empty_cache()
        assert figures() == (20 + 100 / 1024, 22), figures()
        assert (torch.cuda.max_memory_allocated() - a0) == 26 * MiB + 100 * 1024
        for t, v in ((c, 1), (e, 2), (f, 3), (g, 4)):
            t.fill_(v)
        assert sum(t.sum(dtype=torch.int64).item() for t in (c, e, f, g)) == \
            6 * MiB + 2 * 11 * MiB + 3 * (3 * MiB // 2) + 4 * 100 * 1024
    torch.cuda.current_stream().wait_stream(fresh)


if __name__ == "__main__":
    main()
