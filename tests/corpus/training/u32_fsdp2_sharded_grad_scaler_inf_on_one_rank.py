"""FSDP2 with fp16-style loss scaling through ShardedGradScaler: one rank's batch holds an inf, so its gradient
shards are non-finite; the scaler's found_inf is all-reduced (MAX) across ranks, every rank skips the optimizer step
and halves the scale, and the parameters stay as they were on every rank.

EXPECTED: clean
MODELLED ON: torch/distributed/fsdp/sharded_grad_scaler.py ShardedGradScaler.unscale_ (per-device found_inf, then
`dist.all_reduce(v if v.is_cuda else v.cuda(), op=dist.ReduceOp.MAX, group=self.process_group)` on each found_inf,
`_foreach_` copies back) and step/update, as used with `fully_shard` in torchtitan's fp16 path.
REASON: GradScaler semantics (torch docs, "Automatic Mixed Precision examples"): step() is skipped when any
gradient is inf/NaN, update() multiplies the scale by backoff_factor (0.5); the all-reduce makes the decision the
same on every rank. Values: the initial weights (read before the step) and 2**7.
"""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.fsdp import fully_shard
from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler


def main():
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).cuda()
    fully_shard(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = ShardedGradScaler(init_scale=2.0 ** 8)
    g = torch.Generator().manual_seed(100 + rank)
    x = torch.randn(8, 16, generator=g).cuda()
    if rank == 1:
        x[0, 0] = float("inf")
    before = [p.full_tensor().cpu().clone() for p in model.parameters()]
    loss = model(x).pow(2).mean()
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    after = [p.full_tensor().cpu() for p in model.parameters()]
    assert all(torch.equal(a, b) for a, b in zip(before, after)), "a rank stepped on non-finite gradients"
    assert scaler.get_scale() == 2.0 ** 7
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
