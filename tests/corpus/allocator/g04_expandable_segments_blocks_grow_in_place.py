"""Activations of growing sizes under PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: with expandable segments the
caching allocator keeps one segment of address space per stream and grows it by mapping 20 MiB pages after its last
free block, instead of a cudaMalloc per segment, so a 16 MiB tensor that fits no free block starts right after a
4.5 MiB one (the free rest of the first page grows into the next page), a 30 MiB one right after that, and a 9 MiB
tensor takes a freed 16 MiB block before the free tail (which counts as the size it can grow to). The default
allocator gives each of the first two a segment of its own.

EXPECTED: clean
WORLD_SIZE: 1
MODELLED ON: training scripts that set expandable_segments:True against fragmentation (Megatron / NeMo recipes).
RULE: c10/cuda/CUDACachingAllocator.cpp (get_free_block's expandable_size; alloc_block -> try_allocate_expandable_block
-> find_expandable_block, map_block; kLargeBuffer pages). Measured on an H200, torch 2.11 (ci/gpu_g_facts.py
`expandable`, docs/gpu-g-facts-2026-12-04.md): the same offsets and memory_allocated figures.
WHAT SIMDIST SAYS: clean. (Before g7 the offsets were the default allocator's: separate segments.)
"""
import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"

import torch  # noqa: E402


def main():
    MiB = 1 << 20
    a = torch.empty(int(4.5 * MiB), dtype=torch.uint8, device="cuda")
    b = torch.empty(16 * MiB, dtype=torch.uint8, device="cuda")
    c = torch.empty(30 * MiB, dtype=torch.uint8, device="cuda")
    base = a.data_ptr()
    offs = [(t.data_ptr() - base) / MiB for t in (a, b, c)]
    del b
    f = torch.empty(9 * MiB, dtype=torch.uint8, device="cuda")
    offs.append((f.data_ptr() - base) / MiB)
    assert offs == [0.0, 4.5, 20.5, 4.5], offs
    f.fill_(2)
    assert f.sum().item() == 2 * 9 * MiB
    assert torch.cuda.memory_allocated() == int(4.5 * MiB) + 30 * MiB + 9 * MiB


if __name__ == "__main__":
    main()
