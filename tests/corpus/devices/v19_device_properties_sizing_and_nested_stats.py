"""Kernel launch sizing from the device's properties, as Triton-style and Megatron/TE code does
(`torch.cuda.get_device_properties(dev).multi_processor_count`, warp size, threads and shared memory per
block), and the nested memory statistics that memory monitors read (torch.cuda.memory_stats_as_nested_dict):
an H200's architectural figures, and the nested dict agreeing with the flat one.

EXPECTED: clean
WORLD_SIZE: 1
REASON: torch/csrc/cuda/Module.cpp registerCudaDeviceProperties (cudaDeviceProp fields: multiProcessorCount, warpSize, maxThreadsPerBlock, maxThreadsPerMultiProcessor, regsPerMultiprocessor, sharedMemPerBlock, sharedMemPerBlockOptin, sharedMemPerMultiprocessor; sm_90 H200 SXM: 132 SMs, 2048 threads/SM, 64 Ki registers/SM, 48 KiB/227 KiB shared per block, 228 KiB per SM); torch/cuda/memory.py memory_stats (flattens memory_stats_as_nested_dict with '.').
"""
import torch


def main():
    torch.cuda.set_device(0)
    p = torch.cuda.get_device_properties(torch.device("cuda", 0))
    assert (p.major, p.minor) == torch.cuda.get_device_capability(0) == (9, 0)
    assert "H200" in p.name and p.multi_processor_count == 132
    assert (p.warp_size, p.max_threads_per_block, p.max_threads_per_multi_processor) == (32, 1024, 2048)
    assert p.regs_per_multiprocessor == 65536
    assert (p.shared_memory_per_block, p.shared_memory_per_block_optin, p.shared_memory_per_multiprocessor) == \
        (48 * 1024, 227 * 1024, 228 * 1024)
    n = 1 << 20
    block = min(1024, p.max_threads_per_block)
    grid = min(p.multi_processor_count * (p.max_threads_per_multi_processor // block), (n + block - 1) // block)
    x = torch.arange(n, dtype=torch.float32, device="cuda")
    chunks = x.chunk(grid)
    partial = torch.stack([c.sum() for c in chunks])
    assert partial.sum().item() == (n - 1) * n / 2
    nested = torch.cuda.memory_stats_as_nested_dict()
    flat = torch.cuda.memory_stats()
    assert nested["allocated_bytes"]["all"]["current"] == flat["allocated_bytes.all.current"] == \
        torch.cuda.memory_allocated()
    assert nested["reserved_bytes"]["all"]["peak"] == flat["reserved_bytes.all.peak"]


if __name__ == "__main__":
    main()
