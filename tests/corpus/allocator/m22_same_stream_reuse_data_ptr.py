"""What the caching allocator hands out next: a block freed on the stream it was allocated on is reused at once
for the same size on that stream (same data_ptr), record_stream on the block's own stream changes nothing, and a
block allocated under a side stream's context is not reused for an allocation on the default stream (pools are
per stream) until that side stream allocates again.

EXPECTED: clean
WORLD_SIZE: 1
REASON: c10/cuda/CUDACachingAllocator.cpp: BlockPool lookups key on (stream, size) (get_free_block: `p.pool->blocks.lower_bound(&p.search_key)` with search_key's stream); free_block returns a block to its stream's pool; recordStream ignores the allocation stream (`if (stream.stream() == block->stream) return;`).
"""
import torch


def main():
    torch.cuda.set_device(0)
    x = torch.empty(1 << 18, device="cuda")
    p = x.data_ptr()
    del x
    y = torch.empty(1 << 18, device="cuda")
    assert y.data_ptr() == p, "same-stream reuse"
    y.record_stream(torch.cuda.current_stream())       # its own stream: ignored
    del y
    z = torch.empty(1 << 18, device="cuda")
    assert z.data_ptr() == p, "record_stream on the allocation stream must not delay reuse"

    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        s = torch.empty(1 << 18, device="cuda")
    q = s.data_ptr()
    del s
    d = torch.empty(1 << 18, device="cuda")             # default stream: not the side stream's block
    assert d.data_ptr() != q
    with torch.cuda.stream(side):
        s2 = torch.empty(1 << 18, device="cuda")
    assert s2.data_ptr() == q, "the side stream's pool"
    side.synchronize()
    z.fill_(1.0)
    assert z.sum().item() == float(1 << 18)


if __name__ == "__main__":
    main()
