"""torch FSDP1 (`FullyShardedDataParallel`) over every sharding strategy a single host uses (FULL_SHARD,
SHARD_GRAD_OP, NO_SHARD; FULL_SHARD again with use_orig_params=True), auto-wrapped per block, with
limit_all_gathers and forward_prefetch, three AdamW steps each: the full parameters (summon_full_params) equal one
process training on the average loss of both ranks' batches.

EXPECTED: clean
WORLD_SIZE: 2
MODELLED ON: torch/distributed/fsdp/fully_sharded_data_parallel.py (the FSDP1 API as its tutorial uses it:
ModuleWrapPolicy, ShardingStrategy, summon_full_params); its streams are _runtime_utils.py's unshard / post-backward
streams with their waits (`_wait_for_computation_stream`, `_post_backward_hook`'s reduce-scatter on the
post-backward stream, `_wait_for_post_backward`'s current-stream wait before the optimizer).
REASON: FSDP1 orders every all-gather before the forward that reads it and every reduce-scatter before the
optimizer step (the current stream waits for its unshard / post-backward streams); with world 2 the gradient
pre-divide factor is 1 and the post-divide 2, so the averaged gradients, and AdamW's updates, are the reference's
bit for bit.
"""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, ShardingStrategy
from torch.distributed.fsdp.wrap import ModuleWrapPolicy


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(32, 32)
        self.act = nn.GELU()

    def forward(self, x):
        return self.act(self.lin(x))


def make():
    torch.manual_seed(0)
    return nn.Sequential(Block(), Block(), nn.Linear(32, 4))


def train(strategy, orig_params, rank, world):
    ref = make()
    model = FSDP(make().cuda(), auto_wrap_policy=ModuleWrapPolicy({Block}), sharding_strategy=strategy,
                 limit_all_gathers=True, forward_prefetch=True, use_orig_params=orig_params)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    for step in range(3):
        xs = [torch.randn(8, 32, generator=torch.Generator().manual_seed(step * 10 + r)) for r in range(world)]
        model(xs[rank].cuda()).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
        (sum(ref(x).pow(2).mean() for x in xs) / world).backward()
        ref_opt.step()
        ref_opt.zero_grad()
    with FSDP.summon_full_params(model):
        err = max((p.detach().cpu() - q.detach()).abs().max().item()
                  for p, q in zip(model.parameters(), ref.parameters()))
    assert err == 0.0, (strategy, orig_params, err)


def main():
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl")
    for strategy, orig in ((ShardingStrategy.FULL_SHARD, False), (ShardingStrategy.SHARD_GRAD_OP, False),
                           (ShardingStrategy.NO_SHARD, False), (ShardingStrategy.FULL_SHARD, True)):
        train(strategy, orig, rank, world)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
