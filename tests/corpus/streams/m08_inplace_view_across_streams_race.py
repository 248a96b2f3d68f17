"""A side stream updates a slice view of a flat buffer in place (a fused-optimizer shard, as in ZeRO's
flat partition) while the default stream reads an overlapping slice of the same buffer; the side stream waited
for the buffer's producer, but nobody orders the reader and the in-place writer.

EXPECTED: hazard
KINDS: write-after-read
KINDS_ALSO: read-after-write
WORLD_SIZE: 1
REASON: views share the base's storage (https://pytorch.org/docs/stable/tensor_view.html); an in-place op on a view writes those bytes on the stream that launches it; two streams without an event between them are unordered (CUDA programming guide, Streams).
"""
import torch


def main():
    torch.cuda.set_device(0)
    flat = torch.arange(1 << 16, dtype=torch.float32, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    shard_a = flat[: 1 << 15]
    overlap = flat[(1 << 15) - 1024: (1 << 15) + 1024]
    total = overlap.sum()                   # default stream reads the overlap
    with torch.cuda.stream(side):
        shard_a.mul_(0.5)                   # BUG: side writes bytes the default stream is still reading
    torch.cuda.current_stream().wait_stream(side)
    print(total.item())


if __name__ == "__main__":
    main()
