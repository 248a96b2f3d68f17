"""DDP with torch.amp.GradScaler: rank 0's loss overflows to inf, DDP's gradient all-reduce spreads the inf to every
rank's gradients, so every rank's scaler finds inf, skips the step and backs off; then a finite step on the next
iteration updates every rank identically.

EXPECTED: clean
MODELLED ON: the standard DDP + AMP loop (torch docs, "Automatic Mixed Precision examples: Working with Multiple
GPUs / DistributedDataParallel"): `scaler.scale(loss).backward(); scaler.step(opt); scaler.update()`.
REASON: DDP averages gradients with an all_reduce (torch/nn/parallel/distributed.py, Reducer), so a non-finite
gradient on one rank makes every rank's gradient non-finite; GradScaler.step skips when found_inf, update() halves
the scale (backoff_factor 0.5) and the next finite step applies. Values: an eager CPU replica of the model.
"""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    lr_ = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(lr_)
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    cpu = nn.Linear(8, 2)
    model = DDP(nn.Linear(8, 2).cuda(), device_ids=[lr_])
    model.module.load_state_dict(cpu.state_dict())
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    scaler = torch.amp.GradScaler("cuda", init_scale=4.0)
    xs = [torch.full((4, 8), 0.25 * (r + 1)) for r in range(world)]
    for it in range(2):
        x = xs[rank].clone()
        if it == 0 and rank == 0:
            x[0, 0] = float("inf")
        loss = model(x.cuda()).pow(2).sum()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
    assert scaler.get_scale() == 2.0          # one backoff, one finite step (growth only after 2000)
    # CPU reference: only the finite second iteration steps, with the world-averaged gradient
    grads = []
    for r in range(world):
        cpu.zero_grad()
        cpu(xs[r]).pow(2).sum().backward()
        grads.append([p.grad.clone() for p in cpu.parameters()])
    with torch.no_grad():
        for i, p in enumerate(cpu.parameters()):
            p -= 0.5 * sum(g[i] for g in grads) / world
    for p, q in zip(model.module.parameters(), cpu.parameters()):
        assert torch.allclose(p.detach().cpu(), q, atol=1e-5), (p, q)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
