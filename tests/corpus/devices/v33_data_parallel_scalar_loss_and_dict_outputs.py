"""nn.DataParallel around a module that computes its own loss and returns (scalar loss, dict of outputs), as
Hugging Face-style models do under DataParallel: Gather unsqueezes each replica's 0-dim loss into a vector of
one loss per device (with its warning) and gathers dict values along dim 0 on the output device; the mean of the
per-replica losses backpropagates into the module's parameters like the CPU computation of the same chunks.

EXPECTED: clean
WORLD_SIZE: 1
DEVICE_COUNT: 2
REASON: torch/nn/parallel/_functions.py Gather.forward ("Was asked to gather along dimension 0, but all input tensors were scalars; will instead unsqueeze and return a vector"); torch/nn/parallel/scatter_gather.py gather (dicts gathered per key); torch/csrc/cuda/comm.cpp gather.
"""
import copy
import warnings

import torch
import torch.nn as nn


class WithLoss(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(6, 10), nn.Tanh(), nn.Linear(10, 3))

    def forward(self, x, y):
        logits = self.net(x)
        return nn.functional.cross_entropy(logits, y), {"logits": logits, "pred": logits.argmax(-1)}


def main():
    torch.cuda.set_device(0)
    torch.manual_seed(0)
    ref = WithLoss()
    gpu = copy.deepcopy(ref).cuda()
    dp = nn.DataParallel(gpu, device_ids=[0, 1])
    x, y = torch.randn(8, 6), torch.randint(0, 3, (8,))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        loss, out = dp(x.cuda(), y.cuda())
    assert loss.shape == (2,) and loss.device.index == 0
    assert out["logits"].shape == (8, 3) and out["pred"].device.index == 0
    loss.mean().backward()
    ref_losses = torch.stack([ref(x[:4], y[:4])[0], ref(x[4:], y[4:])[0]])
    ref_losses.mean().backward()
    assert torch.allclose(loss.detach().cpu(), ref_losses.detach(), rtol=1e-5, atol=1e-6)
    assert torch.equal(out["pred"].cpu(), ref.net(x).argmax(-1))
    for p, q in zip(ref.parameters(), gpu.parameters()):
        assert torch.allclose(p.grad, q.grad.cpu(), rtol=1e-5, atol=1e-6)


if __name__ == "__main__":
    main()
