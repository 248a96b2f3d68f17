"""Manual data parallel: each rank backward on its shard, synchronous all_reduce of every .grad, /world, Adam step.
Result must equal single-process training on the full batch.

EXPECTED: clean
REASON: torch>=2.8 synchronous collectives run on the current stream, ordered after backward and before step.
"""
import copy
import os
import torch
import torch.nn as nn
import torch.distributed as dist


def make():
    torch.manual_seed(11)
    return nn.Sequential(nn.Linear(10, 20), nn.Tanh(), nn.Linear(20, 1))


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    ref = make()
    gpu = copy.deepcopy(ref).cuda()
    g = torch.Generator().manual_seed(2)
    X, Y = torch.randn(8, 10, generator=g), torch.randn(8, 1, generator=g)
    opt_ref = torch.optim.Adam(ref.parameters(), lr=1e-2)
    opt = torch.optim.Adam(gpu.parameters(), lr=1e-2)
    for _ in range(2):
        opt_ref.zero_grad()
        nn.functional.mse_loss(ref(X), Y).backward()
        opt_ref.step()
        opt.zero_grad()
        xs, ys = X.chunk(world)[rank].cuda(), Y.chunk(world)[rank].cuda()
        nn.functional.mse_loss(gpu(xs), ys).backward()
        for p in gpu.parameters():
            dist.all_reduce(p.grad)
            p.grad.div_(world)
        opt.step()
    for p, q in zip(ref.parameters(), gpu.parameters()):
        assert torch.allclose(p, q.detach().cpu(), atol=1e-5), (p - q.detach().cpu()).abs().max()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
