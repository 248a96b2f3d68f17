"""record_stream protects a block until the work the stream had queued *when the tensor is freed* is done, not only
the work queued when record_stream was called: a batch made on the default stream is read on a side stream,
record_stream(side) is called, the side stream then queues more (slow) work reading it, and only then is the
tensor dropped. The default stream's next allocation of the same size must not take the block while that later
side work may still read it; the values equal a CPU run's.

EXPECTED: clean
WORLD_SIZE: 1
MODELLED ON: prefetchers that call record_stream right after the first use on the consumer stream and keep using
the tensor there before dropping it.
RULE: https://pytorch.org/docs/stable/generated/torch.Tensor.record_stream.html ("When the tensor is deallocated,
ensure the tensor memory is not reused for another tensor until all work queued on stream at the time of
deallocation are complete"); c10/cuda/CUDACachingAllocator.cpp free: insert_events records an event on every
stream in block->stream_uses at the free.
WHAT SIMDIST SAYS: clean (a regression guard: no program had side work queued between record_stream and the free).
"""
import torch


def main():
    torch.cuda.set_device(0)
    side = torch.cuda.Stream()
    n = 1 << 18
    x = torch.ones(n, device="cuda")
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        y = x * 2
    x.record_stream(side)
    with torch.cuda.stream(side):
        torch.cuda._sleep(5_000_000)            # the side stream is slow
        z = x * 3                               # queued after record_stream, before the free
    del x
    w = torch.full((n,), 7.0, device="cuda")    # same size, default stream: may not reuse x's block yet
    torch.cuda.current_stream().wait_stream(side)
    for t in (y, z):
        t.record_stream(torch.cuda.current_stream())
    assert y.sum().item() == 2 * n and z.sum().item() == 3 * n and w.sum().item() == 7 * n


if __name__ == "__main__":
    main()
