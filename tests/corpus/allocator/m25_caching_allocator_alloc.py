"""A raw device buffer from torch.cuda.caching_allocator_alloc (how some extensions, e.g. apex's and
bitsandbytes' older paths, get workspace) handed to a kernel as an int pointer: simdist has no raw device
pointers, so either it works or it is refused by name.

EXPECTED: clean-or-error
ERROR: UnsupportedOperation
WORLD_SIZE: 1
REASON: torch/cuda/memory.py caching_allocator_alloc(size, device, stream) returns a raw pointer (int) from the caching allocator; caching_allocator_delete frees it.
"""
import torch


def main():
    torch.cuda.set_device(0)
    ptr = torch.cuda.caching_allocator_alloc(4096, 0, torch.cuda.current_stream())
    assert isinstance(ptr, int) and ptr != 0
    torch.cuda.caching_allocator_delete(ptr)


if __name__ == "__main__":
    main()
