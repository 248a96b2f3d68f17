"""A tensor used on a side stream, record_stream'ed and dropped, then torch.cuda.empty_cache() (what memory-tight
loops do between phases): empty_cache waits for the side stream's pending use, so the segment is returned and
memory_reserved() falls back to where it was; the data the side stream produced is intact.

EXPECTED: clean
WORLD_SIZE: 1
REASON: c10/cuda/CUDACachingAllocator.cpp release_cached_blocks: synchronize_and_free_events (cudaEventSynchronize on every outstanding record_stream event, then free_block) before release_blocks of the large and small pools.
"""
import torch

MiB = 1 << 20


def main():
    torch.cuda.set_device(0)
    torch.cuda.empty_cache()
    r0 = torch.cuda.memory_reserved()
    side = torch.cuda.Stream()
    a = torch.randn(MiB)                        # 4 MiB
    out = torch.empty(16, device="cuda")        # small pool, on the default stream
    r1 = torch.cuda.memory_reserved()
    x = a.cuda()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        part = x.view(16, -1).sum(dim=1)        # small pool, side stream segment
        out.copy_(part)
    x.record_stream(side)
    out.record_stream(side)
    del x
    torch.cuda.empty_cache()
    # x's 20 MiB segment released once its side use is done; the side stream's small segment holds part
    assert torch.cuda.memory_reserved() == r1 + 2 * MiB, (torch.cuda.memory_reserved() - r0) / MiB
    torch.cuda.current_stream().wait_stream(side)
    assert torch.allclose(out.cpu(), a.view(16, -1).sum(dim=1), rtol=1e-4, atol=1e-3)


if __name__ == "__main__":
    main()
