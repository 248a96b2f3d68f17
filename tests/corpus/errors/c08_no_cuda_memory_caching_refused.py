"""PYTORCH_NO_CUDA_MEMORY_CACHING=1, the debugging switch the CUDA semantics note gives for cuda-memcheck: every
tensor is then a cudaMalloc and every free a cudaFree, which synchronizes the device, and the caching allocator's
statistics stay at 0. A buffer freed while a side stream still reads it (no record_stream) is then not reused
under that read, and memory_allocated() reads 0 on a GPU. simdist models only the caching allocator: it must
refuse the run by name rather than report the caching allocator's reuse race and figures.

EXPECTED: error
ERROR: UnsupportedOperation
WORLD_SIZE: 1
MODELLED ON: "PYTORCH_NO_CUDA_MEMORY_CACHING=1 CUDA_LAUNCH_BLOCKING=1 python script.py", the usual recipe for a
deterministic crash.
RULE: https://pytorch.org/docs/stable/notes/cuda.html#memory-management ("set PYTORCH_NO_CUDA_MEMORY_CACHING=1 in
your environment to disable caching"); c10/cuda/CUDACachingAllocator.cpp forceUncachedAllocator
(`getenv("PYTORCH_NO_CUDA_MEMORY_CACHING") != nullptr`) and uncached_delete (`cudaFree(ptr)`).
WHAT SIMDIST SAYS: UnsupportedOperation naming the variable (before c08 a reuse-after-free and nonzero figures).
"""
import os

os.environ["PYTORCH_NO_CUDA_MEMORY_CACHING"] = "1"

import torch  # noqa: E402


def main():
    torch.cuda.set_device(0)
    side = torch.cuda.Stream()
    x = torch.ones(1 << 18, device="cuda")
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        y = x * 2
    del x                                        # cudaFree: waits for the device
    w = torch.zeros(1 << 18, device="cuda")
    torch.cuda.synchronize()
    print(y.sum().item(), w.sum().item(), torch.cuda.memory_allocated())


if __name__ == "__main__":
    main()
