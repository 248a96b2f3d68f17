"""Naive model parallelism in one process (the PyTorch model-parallel tutorial's ModelParallelResNet50 shape:
the first half on cuda:0, the second on cuda:1, the activation moved with .to('cuda:1') between them, the loss
on cuda:1 and the gradients flowing back across the copy): two SGD steps give the parameters of the same model
trained on the CPU.

EXPECTED: clean
WORLD_SIZE: 1
DEVICE_COUNT: 2
REASON: https://pytorch.org/tutorials/intermediate/model_parallel_tutorial.html (seq1 on cuda:0, seq2 on cuda:1, x.to('cuda:1')); aten/src/ATen/native/cuda/Copy.cu copy_device_to_device orders the copy with both devices' current streams; autograd's CopyBackwards moves the gradient back to the source device.
"""
import copy

import torch
import torch.nn as nn


class TwoGPU(nn.Module):
    def __init__(self, a, b):
        super().__init__()
        self.a = a.to("cuda:0")
        self.b = b.to("cuda:1")

    def forward(self, x):
        return self.b(self.a(x.to("cuda:0")).to("cuda:1"))


def main():
    torch.cuda.set_device(0)
    torch.manual_seed(0)
    a = nn.Sequential(nn.Linear(24, 48), nn.ReLU())
    b = nn.Sequential(nn.Linear(48, 48), nn.ReLU(), nn.Linear(48, 6))
    ref = nn.Sequential(copy.deepcopy(a), copy.deepcopy(b))
    model = TwoGPU(a, b)
    opt, opt_ref = torch.optim.SGD(model.parameters(), lr=0.05), torch.optim.SGD(ref.parameters(), lr=0.05)
    for _ in range(2):
        x, y = torch.randn(12, 24), torch.randn(12, 6)
        out = model(x)
        assert out.device == torch.device("cuda", 1)
        loss = nn.functional.mse_loss(out, y.to("cuda:1"))
        opt.zero_grad()
        loss.backward()
        assert model.a[0].weight.grad.device.index == 0 and model.b[0].weight.grad.device.index == 1
        opt.step()
        opt_ref.zero_grad()
        nn.functional.mse_loss(ref(x), y).backward()
        opt_ref.step()
    for p, q in zip(ref.parameters(), model.parameters()):
        assert torch.allclose(p, q.detach().cpu(), rtol=1e-5, atol=1e-6), (p - q.detach().cpu()).abs().max()


if __name__ == "__main__":
    main()
