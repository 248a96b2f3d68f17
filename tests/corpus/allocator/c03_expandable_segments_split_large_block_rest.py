"""With expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, here switched on at run time, the
switch torchtitan and Megatron recommend), the caching allocator splits a large-pool block as it splits a small
one: whenever the rest is at least 512 bytes. A 4.5 MiB tensor takes a 20 MiB piece of the large pool, and a
15.2 MiB tensor then takes the rest but 0.3 MiB: by default that rest (under 1 MiB) is not split off and
memory_allocated counts the whole 15.5 MiB block (20 MiB in all); with expandable segments it is split and
memory_allocated is the two tensors' sizes exactly. Reserved memory (mapped pages) is not asked.

EXPECTED: clean
WORLD_SIZE: 1
MODELLED ON: code that checks memory_allocated() against its tensors' sizes after turning expandable segments on.
RULE: https://pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf
(expandable_segments); c10/cuda/CUDACachingAllocator.cpp should_split: `if (block->pool->is_small ||
CUDAAllocatorConfig::expandable_segments()) return remaining >= kMinBlockSize; else return (size <
max_split_size()) && (remaining > kSmallSize)`; the H200's figures (ci/gpu_c_facts.py, docs/gpu/c-series-facts-
2026-12-02.json): 20971520 by default, 20656640 with expandable segments.
WHAT SIMDIST SAYS: clean (before c03 memory_allocated was 20971520 with expandable segments too).
"""
import warnings

import torch

MiB = 1 << 20


def main():
    torch.cuda.set_device(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch.cuda._set_allocator_settings is deprecated
        torch.cuda.memory._set_allocator_settings("expandable_segments:True")
    a = torch.empty(int(4.5 * MiB), dtype=torch.uint8, device="cuda")
    b = torch.empty(int(15.2 * MiB) // 512 * 512, dtype=torch.uint8, device="cuda")
    assert torch.cuda.memory_allocated() == a.numel() + b.numel(), torch.cuda.memory_allocated()
    a.fill_(1)
    b.fill_(2)
    assert a.sum().item() == a.numel() and b.sum().item() == 2 * b.numel()
    del a, b
    assert torch.cuda.memory_allocated() == 0


if __name__ == "__main__":
    main()
