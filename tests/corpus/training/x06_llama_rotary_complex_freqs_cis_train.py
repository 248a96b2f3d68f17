"""Llama's rotary position embedding as meta-llama/llama and torchtitan write it, with complex numbers:
`freqs_cis = torch.polar(ones, outer(t, freqs))` (complex64), queries and keys viewed as complex pairs
(`torch.view_as_complex`), multiplied by freqs_cis, viewed back as real (`torch.view_as_real`), inside a small
attention block trained with AdamW for three steps: the losses and parameters equal the same loop on the CPU.
The backward of the complex multiply is `grad * freqs_cis.conj()`, a lazy conjugate view.

EXPECTED: clean
WORLD_SIZE: 1
MODELLED ON: meta-llama/llama llama/model.py `precompute_freqs_cis`, `reshape_for_broadcast`, `apply_rotary_emb`;
torchtitan torchtitan/models/llama3/model.py (the same three functions); torch.nn.functional.scaled_dot_product_attention
with is_causal=True.
REASON: https://pytorch.org/docs/stable/complex_numbers.html (complex autograd: the gradient of a * b with
respect to a is grad * conj(b)); https://pytorch.org/docs/stable/generated/torch.conj.html (conj() is a lazy view
with the conjugate bit, resolved before ops that do not handle it). simdist computed a * b for a * b.conj() before
notes x5, so the gradients were wrong with no error.
"""
import copy

import torch
import torch.nn as nn
import torch.nn.functional as F


def precompute_freqs_cis(dim, end, theta=10000.0, device=None):
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2, device=device)[: dim // 2].float() / dim))
    t = torch.arange(end, device=freqs.device, dtype=torch.float32)
    return torch.polar(torch.ones(end, dim // 2, device=freqs.device), torch.outer(t, freqs))


def apply_rotary_emb(xq, xk, freqs_cis):
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    fc = freqs_cis.view(1, xq_.shape[1], 1, xq_.shape[-1])  # reshape_for_broadcast: (1, seq, 1, head_dim/2)
    xq_out = torch.view_as_real(xq_ * fc).flatten(3)
    xk_out = torch.view_as_real(xk_ * fc).flatten(3)
    return xq_out.type_as(xq), xk_out.type_as(xk)


class Attention(nn.Module):
    def __init__(self, dim=32, heads=4):
        super().__init__()
        self.heads, self.hd = heads, dim // heads
        self.wq, self.wk = nn.Linear(dim, dim, bias=False), nn.Linear(dim, dim, bias=False)
        self.wv, self.wo = nn.Linear(dim, dim, bias=False), nn.Linear(dim, dim, bias=False)

    def forward(self, x, freqs_cis):
        b, s, _ = x.shape
        q = self.wq(x).view(b, s, self.heads, self.hd)
        k = self.wk(x).view(b, s, self.heads, self.hd)
        v = self.wv(x).view(b, s, self.heads, self.hd)
        q, k = apply_rotary_emb(q, k, freqs_cis)
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        return self.wo(o.transpose(1, 2).reshape(b, s, -1))


def main():
    torch.cuda.set_device(0)
    torch.manual_seed(0)
    ref = Attention()
    model = copy.deepcopy(ref).cuda()
    opt, opt_ref = (torch.optim.AdamW(m.parameters(), lr=1e-2) for m in (model, ref))
    fc, fc_ref = precompute_freqs_cis(8, 6, device="cuda"), precompute_freqs_cis(8, 6)
    assert fc.dtype == torch.complex64 and torch.allclose(fc.cpu(), fc_ref, atol=1e-6)
    for step in range(3):
        x, y = torch.randn(2, 6, 32), torch.randn(2, 6, 32)
        loss = F.mse_loss(model(x.cuda(), fc), y.cuda())
        opt.zero_grad()
        loss.backward()
        opt.step()
        loss_ref = F.mse_loss(ref(x, fc_ref), y)
        opt_ref.zero_grad()
        loss_ref.backward()
        opt_ref.step()
        assert abs(loss.item() - loss_ref.item()) < 1e-5, (step, loss.item(), loss_ref.item())
    for (n, p), q in zip(ref.named_parameters(), model.parameters()):
        assert torch.allclose(p, q.detach().cpu(), rtol=1e-4, atol=1e-5), (n, (p - q.detach().cpu()).abs().max())
    print("rotary attention: losses and parameters match the CPU")


if __name__ == "__main__":
    main()
