"""F.scaled_dot_product_attention on CUDA (causal, with an additive mask, with GQA via enable_gqa), forward and
backward, against the explicit softmax(QK^T/sqrt(d) + mask)V formula on the CPU.

EXPECTED: clean
WORLD_SIZE: 1
REASON: https://pytorch.org/docs/stable/generated/torch.nn.functional.scaled_dot_product_attention.html (the reference implementation in its docstring: scale 1/sqrt(E), causal tril mask, enable_gqa repeats K/V heads).
"""
import math

import torch
import torch.nn.functional as F


def reference(q, k, v, mask=None, causal=False):
    if k.size(1) != q.size(1):
        rep = q.size(1) // k.size(1)
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if causal:
        L, S = q.size(-2), k.size(-2)
        s = s.masked_fill(~torch.ones(L, S, dtype=torch.bool).tril(), float("-inf"))
    if mask is not None:
        s = s + mask
    return torch.softmax(s, dim=-1) @ v


def main():
    torch.cuda.set_device(0)
    g = torch.Generator().manual_seed(0)
    B, H, L, E = 2, 4, 16, 8
    q, k, v = (torch.randn(B, H, L, E, generator=g) for _ in range(3))
    mask = torch.randn(L, L, generator=g)
    for case in ("causal", "mask", "gqa"):
        kk, vv = (k[:, :2], v[:, :2]) if case == "gqa" else (k, v)
        cpu = [t.clone().requires_grad_(True) for t in (q, kk, vv)]
        gpu = [t.cuda().requires_grad_(True) for t in (q, kk, vv)]
        ref = reference(*cpu, mask=mask if case == "mask" else None, causal=case != "mask")
        out = F.scaled_dot_product_attention(*gpu, attn_mask=mask.cuda() if case == "mask" else None,
                                             is_causal=case != "mask", enable_gqa=case == "gqa")
        assert torch.allclose(out.detach().cpu(), ref.detach(), rtol=1e-4, atol=1e-5), case
        w = torch.randn(ref.shape, generator=g)
        (ref * w).sum().backward()
        (out * w.cuda()).sum().backward()
        for a, b in zip(cpu, gpu):
            assert torch.allclose(a.grad, b.grad.cpu(), rtol=1e-4, atol=1e-5), (case, (a.grad - b.grad.cpu()).abs().max())


if __name__ == "__main__":
    main()
