"""Megatron-LM's examples/run_simple_mcore_train_loop.py pattern at TP=2, without Megatron: the script never seeds
the host generators, builds the full master weight of each tensor-parallel layer on the CPU with
`use_cpu_initialization=True`, keeps its shard, initializes the replicated position embedding on the CPU too, and
shuffles its mock dataset with DataLoader(shuffle=True). Every TP rank must see the same batch and hold the same
replicated weights; the program checks that across the TP group and raises when they differ, which they do under
torchrun, since each process seeds its CPU generator nondeterministically. z02 is the same with torch.manual_seed.

EXPECTED: error
ERROR: RuntimeError
WORLD_SIZE: 2
MODELLED ON: Megatron-LM core_v0.16.1 examples/run_simple_mcore_train_loop.py (no torch.manual_seed; only
model_parallel_cuda_manual_seed(123), which seeds the CUDA generators), megatron/core/tensor_parallel/layers.py
`_initialize_affine_weight_cpu` (master weight drawn on the CPU, then split), models/common/embeddings/
language_model_embedding.py (position embeddings initialized on each rank), torch.utils.data RandomSampler (its seed
drawn from the default CPU generator at iter()). Run unmodified under torchrun on CPU (gloo), its two TP ranks got
different batches (token sums 16379 vs 16371) and position embeddings (sums -0.351 vs 0.366); notes z2.
RULE: a fresh process's default CPU generator is seeded with getNonDeterministicRandom()
(aten/src/ATen/CPUGeneratorImpl.cpp getDefaultCPUGenerator); only the CUDA generators start at
default_rng_seed_val (aten/src/ATen/cuda/CUDAGeneratorImpl.cpp). Until notes z2 simdist seeded every rank's CPU
generator alike and this program's verdict was `clean`.
"""
import os

import torch
import torch.distributed as dist

SEED_HOST = False  # z02: True


def main():
    rank = int(os.environ["RANK"])
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl")
    tp = dist.get_world_size()
    if SEED_HOST:
        torch.manual_seed(1234)
    torch.cuda.manual_seed(123 + 2718 + rank)  # model_parallel_cuda_manual_seed: the CUDA generators only

    master = torch.empty(8, 6)
    torch.nn.init.normal_(master, std=0.02)  # _initialize_affine_weight_cpu: the full weight, then this rank's rows
    fc1 = master.chunk(tp, dim=0)[rank].contiguous().cuda()
    pos = torch.nn.Embedding(16, 6)  # replicated across the TP group
    torch.nn.init.normal_(pos.weight, std=0.02)
    pos = pos.cuda()

    tokens = torch.arange(64 * 16).reshape(64, 16) % 50  # a mock dataset
    loader = torch.utils.data.DataLoader(tokens, batch_size=4, shuffle=True)
    batch = next(iter(loader)).cuda()

    h = pos.weight[: batch.shape[1]].unsqueeze(0) + batch.unsqueeze(-1).float() * 1e-2
    out = h @ fc1.t()
    full = [torch.empty_like(out) for _ in range(tp)]
    dist.all_gather(full, out)  # column-parallel output gathered over TP
    torch.cuda.synchronize()

    mine = torch.stack([batch.double().sum(), pos.weight.double().sum()])
    every = [torch.empty_like(mine) for _ in range(tp)]
    dist.all_gather(every, mine)
    if any(not torch.equal(every[0], e) for e in every[1:]):
        raise RuntimeError(f"tensor-parallel ranks disagree: batch token sums and position-embedding sums "
                           f"{[e.tolist() for e in every]}")
    print(f"rank {rank}: batch sum {mine[0].item():.0f}, output sum {torch.cat(full, -1).sum().item():.6f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
