"""A Fourier neural operator layer (neuraloperator's SpectralConv2d): rfft2 of the input, the lowest modes mixed by
complex weights with einsum, irfft2 back, plus a pointwise conv; the complex weights are nn.Parameters trained
with Adam (which steps complex parameters through torch.view_as_real). Three steps give the losses and parameters
of the same loop on the CPU. The backward of the complex einsum multiplies by the conjugates of its operands
(lazy conj views), and irfft2's backward is an rfft2.

EXPECTED: clean
WORLD_SIZE: 1
MODELLED ON: neuraloperator/neuraloperator's original fourier_2d.py `SpectralConv2d` (weights1/weights2 =
scale * torch.rand(in, out, m1, m2, dtype=torch.cfloat); `compl_mul2d` = torch.einsum("bixy,ioxy->boxy");
out_ft = torch.zeros(..., dtype=torch.cfloat); out_ft[:, :, :m1, :m2] and out_ft[:, :, -m1:, :m2] assigned;
torch.fft.irfft2(out_ft, s=(H, W))); torch/optim/adam.py (`torch.view_as_real` of complex params and state).
REASON: https://pytorch.org/docs/stable/complex_numbers.html (complex autograd with conjugate Wirtinger
derivatives; optimizers treat a complex parameter as two real ones); conj() is a lazy view resolved before ops
that do not handle it (notes x5).
"""
import copy

import torch
import torch.nn as nn


class SpectralConv2d(nn.Module):
    def __init__(self, cin, cout, m1, m2):
        super().__init__()
        self.cout, self.m1, self.m2 = cout, m1, m2
        scale = 1 / (cin * cout)
        self.weights1 = nn.Parameter(scale * torch.rand(cin, cout, m1, m2, dtype=torch.cfloat))
        self.weights2 = nn.Parameter(scale * torch.rand(cin, cout, m1, m2, dtype=torch.cfloat))

    def forward(self, x):
        b, _, h, w = x.shape
        x_ft = torch.fft.rfft2(x)
        out_ft = torch.zeros(b, self.cout, h, w // 2 + 1, dtype=torch.cfloat, device=x.device)
        m1, m2 = self.m1, self.m2
        out_ft[:, :, :m1, :m2] = torch.einsum("bixy,ioxy->boxy", x_ft[:, :, :m1, :m2], self.weights1)
        out_ft[:, :, -m1:, :m2] = torch.einsum("bixy,ioxy->boxy", x_ft[:, :, -m1:, :m2], self.weights2)
        return torch.fft.irfft2(out_ft, s=(h, w))


class FNOBlock(nn.Module):
    def __init__(self, c=4):
        super().__init__()
        self.spec, self.w = SpectralConv2d(c, c, 3, 3), nn.Conv2d(c, c, 1)

    def forward(self, x):
        return nn.functional.gelu(self.spec(x) + self.w(x))


def main():
    torch.cuda.set_device(0)
    torch.manual_seed(0)
    ref = FNOBlock()
    model = copy.deepcopy(ref).cuda()
    assert model.spec.weights1.dtype == torch.complex64 and model.spec.weights1.is_cuda
    opt, opt_ref = (torch.optim.Adam(m.parameters(), lr=1e-2) for m in (model, ref))
    for step in range(3):
        x, y = torch.randn(2, 4, 12, 12), torch.randn(2, 4, 12, 12)
        loss = nn.functional.mse_loss(model(x.cuda()), y.cuda())
        opt.zero_grad()
        loss.backward()
        opt.step()
        loss_ref = nn.functional.mse_loss(ref(x), y)
        opt_ref.zero_grad()
        loss_ref.backward()
        opt_ref.step()
        assert abs(loss.item() - loss_ref.item()) < 1e-5, (step, loss.item(), loss_ref.item())
    for (n, p), q in zip(ref.named_parameters(), model.parameters()):
        assert torch.allclose(p, q.detach().cpu(), rtol=1e-4, atol=1e-5), (n, (p - q.detach().cpu()).abs().max())
    print("FNO block: losses and parameters (complex weights included) match the CPU")


if __name__ == "__main__":
    main()
