"""The memory side of huggingface/pytorch-image-models#2781: a loader that takes a fresh torch.cuda.Stream() every
epoch leaves each epoch's freed blocks cached on a stream nobody allocates on again, so reserved memory grows by a
segment per epoch, until the device's stream pool wraps around (32 streams per priority, handed out round-robin:
the 33rd stream is the first one again, and the blocks cached on it are reused). A loader that keeps one stream
(#2784) reserves one segment for good.

EXPECTED: clean
WORLD_SIZE: 1
MODELLED ON: timm/data/loader.py at 013851bf `PrefetchLoader.__iter__` (`stream = torch.cuda.Stream(device=...)` at
the start of every epoch); issue #2781 "continuously increasing reserved gpu memory caused by `PrefetchLoader`";
PR #2784 "a fresh stream each epoch left every previous epoch's blocks cached but unusable until the 32 entry stream
pool wrapped around".
SIMPLIFIED: an epoch is three 256 KiB batch buffers allocated and freed on the loader's stream (the small pool: one
2 MiB segment per stream).
REASON: c10/cuda/CUDAStream.h "Stream pool note" (32 low-priority streams per device, returned round-robin; "if 33
low priority streams are requested, the first and last streams requested are actually the same stream");
c10/cuda/CUDACachingAllocator.cpp get_free_block (a cached block is taken only by an allocation on the stream it
was allocated on) and kSmallBuffer (allocations of at most 1 MiB come from 2 MiB segments).
"""
import torch

SEG = 2 << 20


def epoch(stream):
    with torch.cuda.stream(stream):
        for _ in range(3):
            batch = torch.empty(64 << 10, device="cuda")  # 256 KiB
            batch.fill_(1.0)
            del batch


def main():
    torch.cuda.set_device(0)
    base = torch.cuda.memory_reserved()
    first = None
    reserved = []
    for e in range(33):  # a fresh stream per epoch, as timm 013851bf
        s = torch.cuda.Stream()
        if first is None:
            first = s
        epoch(s)
        torch.cuda.synchronize()
        reserved.append(torch.cuda.memory_reserved() - base)
    assert reserved[:32] == [SEG * (e + 1) for e in range(32)], reserved  # one more segment per epoch
    assert s == first and s.stream_id == first.stream_id, (s, first)  # the 33rd stream is the first again
    assert reserved[32] == reserved[31], reserved  # ...and the blocks cached on it are reused
    assert torch.cuda.memory_allocated() == 0, torch.cuda.memory_allocated()

    torch.cuda.empty_cache()
    base = torch.cuda.memory_reserved()
    assert base == 0, base
    keep = torch.cuda.Stream()  # one stream per loader, as #2784
    flat = []
    for e in range(4):
        epoch(keep)
        torch.cuda.synchronize()
        flat.append(torch.cuda.memory_reserved() - base)
    assert flat == [SEG] * 4, flat
    print("per-epoch streams:", reserved[0], "...", reserved[-1], "one stream:", flat)


if __name__ == "__main__":
    main()
