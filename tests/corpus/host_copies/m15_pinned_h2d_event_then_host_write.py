"""The fixed m14: a copy-done event recorded after the non_blocking H2D copy, event.synchronize() before the host
refills the pinned staging buffer (the double-buffered prefetcher of NVIDIA's DALI/apex data_prefetcher); both
batches arrive intact.

EXPECTED: clean
WORLD_SIZE: 1
REASON: torch.cuda.Event.synchronize waits until the captured work (the copy) has completed; then the source may be reused (https://pytorch.org/tutorials/intermediate/pinmem_nonblock.html).
"""
import torch


def main():
    torch.cuda.set_device(0)
    g = torch.Generator().manual_seed(0)
    batches = [torch.randn(1 << 16, generator=g) for _ in range(3)]
    staging = torch.empty(1 << 16).pin_memory()
    copy_stream = torch.cuda.Stream()
    outs = []
    for b in batches:
        staging.copy_(b)
        with torch.cuda.stream(copy_stream):
            dev = staging.to("cuda", non_blocking=True)
            done = torch.cuda.Event()
            done.record()
        torch.cuda.current_stream().wait_event(done)
        dev.record_stream(torch.cuda.current_stream())
        outs.append(dev * 2)
        done.synchronize()                   # before the next refill of the staging buffer
    for b, o in zip(batches, outs):
        assert torch.equal(o.cpu(), b * 2)


if __name__ == "__main__":
    main()
