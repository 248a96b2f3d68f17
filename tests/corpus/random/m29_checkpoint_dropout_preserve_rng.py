"""torch.utils.checkpoint with dropout inside the checkpointed block (non-reentrant and reentrant): the recomputed
forward replays the same CUDA dropout mask (preserve_rng_state=True), so the gradients equal those of the same
model run without checkpointing from the same seed.

EXPECTED: clean
WORLD_SIZE: 1
REASON: torch/utils/checkpoint.py: with preserve_rng_state=True the forward stashes torch.cuda.get_rng_state (get_device_states) and the recomputation restores it under torch.random.fork_rng (set_device_states), https://pytorch.org/docs/stable/checkpoint.html.
"""
import copy

import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(32, 64), nn.Linear(64, 32)
        self.drop = nn.Dropout(0.3)

    def forward(self, x):
        return x + self.fc2(self.drop(torch.relu(self.fc1(x))))


def main():
    torch.cuda.set_device(0)
    torch.manual_seed(0)
    plain = nn.Sequential(Block(), Block()).cuda()
    x0 = torch.randn(16, 32)
    grads = {}
    for mode in ("plain", "non_reentrant", "reentrant"):
        model = copy.deepcopy(plain)
        x = x0.cuda().requires_grad_(True)
        torch.cuda.manual_seed(11)
        h = x
        for blk in model:
            if mode == "plain":
                h = blk(h)
            else:
                h = checkpoint(blk, h, use_reentrant=(mode == "reentrant"), preserve_rng_state=True)
        h.pow(2).sum().backward()
        grads[mode] = [p.grad.cpu() for p in model.parameters()] + [x.grad.cpu()]
    for mode in ("non_reentrant", "reentrant"):
        for a, b in zip(grads["plain"], grads[mode]):
            assert torch.allclose(a, b, rtol=1e-5, atol=1e-6), (mode, (a - b).abs().max())


if __name__ == "__main__":
    main()
