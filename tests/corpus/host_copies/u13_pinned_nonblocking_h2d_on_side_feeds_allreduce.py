"""The same upload as u12 but from pinned memory with `non_blocking=True` under the side stream: the host returns at
once, and the default stream's all_reduce is not ordered after the copy (no wait_stream), so it may reduce stale or
partly written bytes.

EXPECTED: hazard
KINDS: read-after-write
KINDS_ALSO: write-after-write, write-after-read
MODELLED ON: a pinned prefetch of batch metadata on a loader stream (torch.utils.data pin_memory + `.to(device,
non_blocking=True)` in the loader stream, as in NVIDIA's data_prefetcher pattern in apex/examples/imagenet) whose
`torch.cuda.current_stream().wait_stream(loader_stream)` was forgotten before the all-reduce.
REASON: aten/src/ATen/native/cuda/Copy.cu: with non_blocking and pinned host memory the copy is only enqueued on the
loader stream (an event is recorded for the host block, no synchronization); the all_reduce on the default stream
(torch >= 2.8: the current stream; earlier: the NCCL stream after waiting the current one) never waits for the
loader stream.
"""
import os

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    loader_stream = torch.cuda.Stream()
    host = torch.full((1 << 16,), float(rank + 1)).pin_memory()
    with torch.cuda.stream(loader_stream):
        stats = host.to("cuda", non_blocking=True)
    dist.all_reduce(stats)                              # BUG: no current_stream().wait_stream(loader_stream)
    print(f"rank {rank}: reduced sum {stats.sum().item()}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
