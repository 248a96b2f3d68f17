"""z01 with the host generators seeded alike on every rank first (`torch.manual_seed(1234)`, what
megatron.training's `_set_random_seed` does before the model is built): every TP rank draws the same master weights,
position embeddings and shuffle, the consistency check passes, and the program is clean.

EXPECTED: clean
WORLD_SIZE: 2
MODELLED ON: Megatron-LM core_v0.16.1 examples/run_simple_mcore_train_loop.py as z01, plus
megatron/training/initialize.py `_set_random_seed` (random.seed, np.random.seed, torch.manual_seed of one seed on
every rank before the model).
RULE: torch.manual_seed(s) reseeds the process's CPU generator (torch/random.py), so ranks that seed alike draw
alike; notes z2.
"""
import os

import torch
import torch.distributed as dist

SEED_HOST = True  # seeds torch.manual_seed(1234) on every rank, as megatron.training does


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
