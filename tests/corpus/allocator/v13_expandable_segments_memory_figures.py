"""Expandable segments switched on at run time (torch.cuda.memory._set_allocator_settings, the same switch as
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True that torchtitan and Megatron recommend): memory_allocated
figures are unchanged (same 512 B rounding and block splitting), but reserved memory is mapped in pages of one
growing segment per stream, figures simdist does not model: it must refuse memory_reserved by name rather than
report the default allocator's.

EXPECTED: clean-or-error
ERROR: UnsupportedOperation
WORLD_SIZE: 1
REASON: c10/cuda/CUDACachingAllocator.cpp alloc_block: with expandable_segments, try_allocate_expandable_block maps pages (map_block: reserved_bytes += mapped size) instead of cudaMalloc of get_allocation_size(); round_size is unchanged; torch/cuda/memory.py _set_allocator_settings -> torch._C._accelerator_setAllocatorSettings.
"""
import torch

MiB = 1 << 20


def main():
    torch.cuda.set_device(0)
    torch.cuda.memory._set_allocator_settings("expandable_segments:True")
    try:
        a0 = torch.cuda.memory_allocated()
        x = torch.empty(3 * MiB, dtype=torch.uint8, device="cuda")
        y = torch.empty(700, dtype=torch.uint8, device="cuda")
        assert torch.cuda.memory_allocated() - a0 == 3 * MiB + 1024
        x.fill_(1)
        y.fill_(2)
        assert x.sum().item() == 3 * MiB and y.sum().item() == 1400
        assert torch.cuda.memory_reserved() >= torch.cuda.memory_allocated()
    finally:
        torch.cuda.memory._set_allocator_settings("expandable_segments:False")


if __name__ == "__main__":
    main()
