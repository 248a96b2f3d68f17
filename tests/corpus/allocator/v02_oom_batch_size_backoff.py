"""Batch-size back-off on CUDA OOM, as accelerate's find_executable_batch_size does (accelerate
src/accelerate/utils/memory.py: should_reduce_batch_size matches "CUDA out of memory." in a RuntimeError, then
release_memory: gc.collect + torch.cuda.empty_cache, and the batch size halves), under a per-process memory
fraction of 200 MiB: batch 2048 and 1024 run out of memory, 512 fits, the cached segments of the failed tries are
released by the allocator's retry, and the result equals plain-python math.

EXPECTED: clean
WORLD_SIZE: 1
REASON: c10/cuda/CUDACachingAllocator.cpp alloc_block: `set_fraction && total_allocated_memory + size > allowed_memory_maximum` fails the cudaMalloc; malloc then release_cached_blocks and retries once (num_alloc_retries), then num_ooms += 1 and TORCH_CHECK_WITH(OutOfMemoryError, ...) "CUDA out of memory. Tried to allocate"; torch.OutOfMemoryError is a RuntimeError; torch/cuda/memory.py set_per_process_memory_fraction (allowed = fraction * total memory).
"""
import gc

import torch

MiB = 1 << 20
COLS = 32768                     # 128 KiB a float32 row


def step(bs):
    x = torch.ones(bs, COLS, device="cuda")          # bs * 128 KiB
    y = x * 2 + 1                                     # as much again
    return y[:, :8].sum().item()


def should_reduce_batch_size(e):
    return isinstance(e, RuntimeError) and len(e.args) == 1 and "CUDA out of memory." in e.args[0]


def main():
    torch.cuda.set_device(0)
    torch.cuda.empty_cache()                          # the limit counts every reserved segment of the process
    total = torch.cuda.get_device_properties(0).total_memory
    base = torch.cuda.memory_reserved()  # what a shared process (the GPU runner) already holds: 0 in a fresh one
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.set_per_process_memory_fraction((base + 200 * MiB) / total)
    st0 = torch.cuda.memory_stats()
    bs, tried = 2048, []
    try:
        while True:
            try:
                result = step(bs)
                break
            except Exception as e:          # noqa: BLE001 - the back-off loop's own filter follows
                if not should_reduce_batch_size(e):
                    raise
                assert isinstance(e, torch.OutOfMemoryError), type(e)
                tried.append(bs)
                gc.collect()
                torch.cuda.empty_cache()
                bs //= 2
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)
    assert tried == [2048, 1024] and bs == 512, (tried, bs)
    assert result == 512 * 8 * 3.0, result
    st = torch.cuda.memory_stats()
    assert st["num_ooms"] - st0["num_ooms"] == 2, st["num_ooms"]
    assert torch.cuda.max_memory_reserved() <= base + 200 * MiB + 2 * MiB


if __name__ == "__main__":
    main()
