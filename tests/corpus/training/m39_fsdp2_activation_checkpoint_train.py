"""torch FSDP2 (fully_shard per block and at the root) with activation checkpointing (non-reentrant
torch.utils.checkpoint inside each block, as torchtitan applies it) and AdamW, 3 steps on each rank's half of the
global batch; the unsharded parameters (full_tensor of each DTensor) are checked against a single-process CPU
run on the full batch.

EXPECTED: clean
REASON: FSDP2 (torch/distributed/fsdp/_fully_shard) reduce-scatters the gradients averaged over the data-parallel ranks; checkpoint recomputes the block in backward with the same weights (all-gathered again by FSDP2's pre-backward hook); the result equals full-batch training (https://pytorch.org/docs/stable/distributed.fsdp.fully_shard.html).
"""
import copy
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.fsdp import fully_shard
from torch.utils.checkpoint import checkpoint

STEPS, LR = 3, 1e-2


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(16, 32), nn.Linear(32, 16)

    def forward(self, x):
        return checkpoint(lambda t: t + self.fc2(torch.relu(self.fc1(t))), x, use_reentrant=False)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block(), Block()])
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return self.head(x)


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    torch.manual_seed(0)
    ref = Model()
    model = copy.deepcopy(ref).cuda()
    for b in model.blocks:
        fully_shard(b)
    fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0)
    opt_ref = torch.optim.AdamW(ref.parameters(), lr=LR, weight_decay=0.0)
    per = 8 // world
    for step in range(STEPS):
        g = torch.Generator().manual_seed(step)
        x, y = torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)
        opt.zero_grad()
        nn.functional.mse_loss(model(x[rank * per:(rank + 1) * per].cuda()), y[rank * per:(rank + 1) * per].cuda()).backward()
        opt.step()
        opt_ref.zero_grad()
        nn.functional.mse_loss(ref(x), y).backward()
        opt_ref.step()
    for (name, p), q in zip(ref.named_parameters(), model.parameters()):
        full = q.full_tensor().detach().cpu()
        assert torch.allclose(p.detach(), full, rtol=1e-4, atol=1e-5), (name, (p.detach() - full).abs().max())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
