"""torch.nn.RMSNorm (F.rms_norm) in a small pre-norm residual MLP, as torchtitan's Llama and transformers'
DiffLlama use it, trained for three SGD steps on the device and on the CPU. On CUDA F.rms_norm is two fused kernels,
aten._fused_rms_norm forward and aten._fused_rms_norm_backward (measured on an H200: docs/gpu/
b-series-facts-2026-12-02.json rms_norm_ops), each in float opmath; the CPU runs its decomposition
(rms_norm_composite). The losses and weights agree within float32 rounding.

EXPECTED: clean
WORLD_SIZE: 1
MODELLED ON: pytorch/torchtitan torchtitan/models/llama3/model/model.py (`nn.RMSNorm(dim, eps=norm_eps)` as
attention_norm / ffn_norm / norm) and huggingface/transformers 4.57 models/diffllama/modeling_diffllama.py
(`nn.RMSNorm(2 * head_dim, elementwise_affine=False)`); without either library.
SIMPLIFIED: two residual blocks of RMSNorm + Linear + SiLU, one normalization without a weight, plain SGD.
RULE: aten/src/ATen/native/layer_norm.cpp rms_norm takes the fused kernel on CUDA when the input's and the weight's
dtypes agree (else it warns and runs the composite); its backward is _fused_rms_norm_backward
(tools/autograd/derivatives.yaml).
WHAT SIMDIST SAYS: clean; one _fused_rms_norm and one _fused_rms_norm_backward kernel per normalization (before
notes b3: the CPU build's six forward and ~15 backward kernels).
"""
import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, dim, affine=True):
        super().__init__()
        self.norm = nn.RMSNorm(dim, eps=1e-5, elementwise_affine=affine)
        self.lin = nn.Linear(dim, dim)

    def forward(self, x):
        return x + self.lin(torch.nn.functional.silu(self.norm(x)))


def train(device, batches):
    torch.manual_seed(0)
    model = nn.Sequential(Block(32), Block(32, affine=False), nn.RMSNorm(32), nn.Linear(32, 4)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for x, y in batches:
        loss = nn.functional.cross_entropy(model(x.to(device)), y.to(device))
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses, [p.detach().cpu() for p in model.parameters()]


def main():
    torch.cuda.set_device(0)
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randn(16, 32, generator=g) * 3, torch.randint(0, 4, (16,), generator=g)) for _ in range(3)]
    dev_losses, dev_params = train(torch.device("cuda"), batches)
    cpu_losses, cpu_params = train(torch.device("cpu"), batches)
    worst = max((a - b).abs().max().item() / b.abs().max().item() for a, b in zip(dev_params, cpu_params))
    print("losses", [f"{v:.6f}" for v in dev_losses], "largest relative weight difference from the CPU:", f"{worst:.3g}")
    assert all(abs(a - b) <= 1e-5 * abs(b) for a, b in zip(dev_losses, cpu_losses)), (dev_losses, cpu_losses)
    assert worst < 1e-5, worst


if __name__ == "__main__":
    main()
