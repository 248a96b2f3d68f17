"""A 200 GiB device tensor on a 141 GiB GPU: the caching allocator's cudaMalloc fails, the retry after
releasing the cache fails too, and torch raises torch.OutOfMemoryError (also torch.cuda.OutOfMemoryError, a
RuntimeError), the type that OOM handlers (accelerate's find_executable_batch_size, Lightning's batch-size
finder) catch; nothing is left allocated.

EXPECTED: error
ERROR: OutOfMemoryError
WORLD_SIZE: 1
REASON: c10/cuda/CUDACachingAllocator.cpp malloc: alloc_block -> cudaMalloc fails (cudaErrorMemoryAllocation), release_cached_blocks + alloc_block(isRetry) fail, then TORCH_CHECK_WITH(OutOfMemoryError, false, "CUDA out of memory. Tried to allocate ...").
"""
import torch


def main():
    torch.cuda.set_device(0)
    before = torch.cuda.memory_allocated()
    try:
        torch.empty(200 << 30, dtype=torch.uint8, device="cuda")
    except torch.cuda.OutOfMemoryError as e:
        assert isinstance(e, RuntimeError) and "CUDA out of memory. Tried to allocate 200.00 GiB" in str(e), str(e)
        assert torch.cuda.memory_allocated() == before
        raise


if __name__ == "__main__":
    main()
