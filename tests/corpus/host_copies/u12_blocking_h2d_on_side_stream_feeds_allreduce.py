"""A batch statistic is copied host-to-device with a blocking `.to("cuda")` under a side-stream context and then
all-reduced on the default stream with no wait_stream: the blocking copy synchronizes its stream before returning,
so the collective launched afterwards reads complete data.

EXPECTED: clean
MODELLED ON: data-loader side streams that upload per-batch metadata (token counts, loss masks) with a plain `.to()`
inside `with torch.cuda.stream(loader_stream)` and all-reduce the count for loss normalisation (e.g. NeMo/Megatron
`num_tokens` all-reduce across DP ranks before dividing the loss).
REASON: aten/src/ATen/native/cuda/Copy.cu copy_kernel_cuda: a host<->device copy is `cudaMemcpyAsync` on the current
stream followed, when non_blocking is False, by `at::cuda::stream_synchronize(stream)`: the host does not return
until the copy is complete (torch docs, CUDA semantics: "non_blocking ... otherwise synchronous").
"""
import os

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    loader_stream = torch.cuda.Stream()
    counts_cpu = torch.tensor([17.0 + rank, 3.0 * rank, 1.0])            # pageable host memory
    with torch.cuda.stream(loader_stream):
        counts = counts_cpu.to("cuda")                                    # blocking: loader_stream synchronized
        mask = torch.ones(4096, device="cuda")
        mask.copy_(torch.arange(4096, dtype=torch.float32).remainder(2))  # blocking copy_ too
    dist.all_reduce(counts)                                               # default stream, no wait_stream
    dist.all_reduce(mask)
    want = torch.tensor([sum(17.0 + r for r in range(world)), sum(3.0 * r for r in range(world)), float(world)])
    assert torch.equal(counts.cpu(), want), counts
    assert torch.equal(mask.cpu(), torch.arange(4096, dtype=torch.float32).remainder(2) * world)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
