"""A plain torchrun script: scale a tensor on a side stream, then all-reduce it.

    torchrun --nproc-per-node=2 examples/torchrun_allreduce.py          # real GPUs
    simdist run examples/torchrun_allreduce.py -n 2                     # simulated: reports the race
    simdist run examples/torchrun_allreduce.py -n 2 -- --fix            # simulated: clean

Without --fix the side stream neither waits for the tensor's producer nor is waited for by the collective
(PyTorch CUDA semantics: work on different streams is unordered unless synchronized).
"""
import argparse
import os

import torch
import torch.distributed as dist


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--fix", action="store_true")
    args = p.parse_args()
    dist.init_process_group("nccl")
    rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(rank)
    x = torch.full((1 << 16,), float(rank + 1), device="cuda")
    side = torch.cuda.Stream()
    if args.fix:
        side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        y = x * 2
    if args.fix:
        torch.cuda.current_stream().wait_stream(side)
        y.record_stream(torch.cuda.current_stream())
    dist.all_reduce(y)
    total = y.sum().item()
    expected = 2.0 * sum(r + 1 for r in range(dist.get_world_size())) * (1 << 16)
    if args.fix:
        assert total == expected, (total, expected)
    print(f"rank {dist.get_rank()}: sum={total} (expected {expected})")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
