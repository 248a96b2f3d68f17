"""A batch staged with tensor.pin_memory() (what DataLoader(pin_memory=True) hands over), moved with
.to("cuda", non_blocking=True), and the host refills the same pinned batch for the next step before the copy is
known to have run (the staging-buffer reuse bug of hand-written prefetchers).

EXPECTED: hazard
KINDS: write-after-read
WORLD_SIZE: 1
REASON: https://pytorch.org/tutorials/intermediate/pinmem_nonblock.html: a non_blocking H2D copy from pinned memory is asynchronous w.r.t. the host; the source must not be modified until the copy has completed.
"""
import torch


def main():
    torch.cuda.set_device(0)
    batch = torch.randn(1 << 16).pin_memory()
    assert batch.is_pinned()
    dev = batch.to("cuda", non_blocking=True)
    batch.copy_(torch.randn(1 << 16))        # BUG: next batch written into the buffer the DMA still reads
    print(dev.sum().item())


if __name__ == "__main__":
    main()
