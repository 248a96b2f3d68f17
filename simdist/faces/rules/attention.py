"""Op rules for the fused attention kernels a GPU runs for `scaled_dot_product_attention` (cuDNN, flash, memory
efficient; forward and backward), which have CUDA kernels only: simdist/faces/sdpa.py routes a simulated CUDA
call to the one a GPU picks, and these rules are what they compute.

Each is one kernel on the current stream that reads q, k, v (and the bias, the output and logsumexp in the
backward) and writes its outputs, laid out as the meta kernels say (the layouts measured on an H200 agree:
docs/gpu/sdp-choice-2026-12-02.json). The values are attention in float32 on the host, softmax by its
logsumexp, exactly the contract of the three kernels (torch/_meta_registrations.py; aten's
attention_backward.cu): out = softmax(q k^T * scale + bias, causal top-left) v, logsumexp per query row, and the
standard gradients from (grad_out, out, logsumexp). Rounding differs from a GPU's tiles as every CPU kernel's
does. Dropout inside a fused kernel draws the kernel's own Philox mask, which simdist does not model: sdpa.py
routes dropout_p > 0 to the math path, and a direct call with dropout is refused by name.
"""
from __future__ import annotations

import math

import torch

from ...engine.errors import UnsupportedOperation
from ...engine.launch import launch
from ..dispatch import _nbytes, _usable, _unwrap, allocate
from ..op_info import op_info
from ..op_rules import register

aten = torch.ops.aten


def _args(func, args, kwargs):
    """All arguments by name, defaults filled in."""
    out = {}
    for i, a in enumerate(func._schema.arguments):
        if i < len(args):
            out[a.name] = args[i]
        elif a.name in kwargs:
            out[a.name] = kwargs[a.name]
        elif a.has_default_value():
            out[a.name] = a.default_value
        else:
            out[a.name] = None
    return out


def _refuse_dropout(name, p):
    if p:
        raise UnsupportedOperation(
            f"aten.{name} with dropout_p={p}: the fused CUDA attention kernels draw their dropout mask from "
            "their own Philox stream, which simdist does not model (F.scaled_dot_product_attention with dropout "
            "runs the math path under simdist)")


def _expand_heads(t, hq):
    h = t.shape[1]
    return t if h == hq else t.repeat_interleave(hq // h, dim=1)


def _scores(q, k, bias, causal, scale):
    """float32 scores q k^T * scale (+ bias, + the causal top-left mask), k already expanded to q's heads."""
    s = torch.matmul(q, k.transpose(-2, -1)) * scale
    if bias is not None:
        s = s + bias.float()
    if causal:
        L, S = s.shape[-2], s.shape[-1]
        keep = torch.ones(L, S, dtype=torch.bool).tril()
        s = s.masked_fill(~keep, float("-inf"))
    return s


def _probs(s, lse):
    p = torch.exp(s - lse.unsqueeze(-1))
    return torch.where(torch.isfinite(lse).unsqueeze(-1), p, torch.zeros((), dtype=p.dtype))  # fully masked row: 0


def attention_forward(q, k, v, bias, causal, scale):
    """(out in q's dtype, logsumexp float32 [B, H, L]) on host tensors."""
    qf, kf, vf = q.float(), _expand_heads(k.float(), q.shape[1]), _expand_heads(v.float(), q.shape[1])
    s = _scores(qf, kf, bias, causal, scale)
    lse = torch.logsumexp(s, dim=-1)
    out = torch.matmul(_probs(s, lse), vf)
    return out.to(q.dtype), lse


def attention_backward(grad_out, q, k, v, out, lse, bias, causal, scale):
    """(grad_q, grad_k, grad_v) in the inputs' dtypes, from the forward's out and logsumexp."""
    hq, hk = q.shape[1], k.shape[1]
    qf, kf, vf = q.float(), _expand_heads(k.float(), hq), _expand_heads(v.float(), hq)
    go, of = grad_out.float(), out.float()
    p = _probs(_scores(qf, kf, bias, causal, scale), lse.float())
    dv = torch.matmul(p.transpose(-2, -1), go)
    dp = torch.matmul(go, vf.transpose(-2, -1))
    ds = p * (dp - (go * of).sum(-1, keepdim=True))
    dq = torch.matmul(ds, kf) * scale
    dk = torch.matmul(ds.transpose(-2, -1), qf) * scale
    if hk != hq:  # grouped-query: the heads that shared a key/value head add their gradients
        b, _, s, d = dk.shape
        dk = dk.view(b, hk, hq // hk, s, d).sum(2)
        dv = dv.view(b, hk, hq // hk, s, dv.shape[-1]).sum(2)
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


def _scale(q, scale):
    return scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])


def _run(me, func, args, kwargs, compute, written):
    """Allocate the op's outputs as its meta kernel lays them out, launch one kernel that fills outputs
    `written` with `compute(host arguments by name)` (host tensors in output order) and zero-fills the others
    (RNG seeds and offsets, a debug mask: no dropout), and return what the op returns."""
    info = op_info(func)
    unwrapped = _unwrap(me, tuple(args), kwargs, False)
    _usable(unwrapped.sims)
    dev = unwrapped.dev
    stream = me.current_stream(dev.index)
    metas = func(*[_meta(a) for a in args], **{k: _meta(v) for k, v in kwargs.items()})
    outs = [allocate(dev, stream, tuple(m.shape), tuple(m.stride()), m.dtype) if isinstance(m, torch.Tensor) else m
            for m in metas]
    tensors = [o for o in outs if isinstance(o, torch.Tensor)]
    inners = [o._inner if isinstance(o, torch.Tensor) else None for o in outs]
    host = _args(func, unwrapped.args, unwrapped.kwargs)

    def fn():
        for i, r in zip(written, compute(host)):
            dst = inners[i]
            if dst.numel() == 0:  # efficient attention's logsumexp when compute_log_sumexp is False
                continue
            if dst.shape != r.shape:
                if dst.numel() == r.numel():  # cuDNN's (B, H, L, 1) logsumexp
                    r = r.reshape(dst.shape)
                else:  # efficient attention's logsumexp: the rows padded to a multiple of 32
                    dst.fill_(float("inf"))
                    dst = dst[..., : r.shape[-1]]
            dst.copy_(r)
        for i, dst in enumerate(inners):
            if dst is not None and i not in written:
                dst.zero_()

    launch(me, stream, info.name, "kernel", fn, unwrapped.sims, tensors,
           _nbytes(unwrapped.sims) + sum(o._alloc.nbytes for o in tensors), skip=4)
    return tuple(outs)


def _meta(a):
    if isinstance(a, torch.Tensor):
        return torch.empty_strided(tuple(a.shape), tuple(a.stride()), dtype=a.dtype, device="meta")
    return a


def _checked(func, args, kwargs):
    """The arguments by name, after the refusals every fused kernel shares."""
    a = _args(func, args, kwargs)
    _refuse_dropout(func._schema.name.split("::")[1], a["dropout_p"])
    mask = a.get("grad_input_mask")
    if mask is not None and mask[3]:
        raise UnsupportedOperation("the gradient of an attention bias that requires grad (memory-efficient "
                                   "attention's grad_input_mask[3]) is not modelled by simdist")
    return a


@register(aten._scaled_dot_product_flash_attention.default, aten._scaled_dot_product_efficient_attention.default,
          aten._scaled_dot_product_cudnn_attention.default)
def _forward(me, func, args, kwargs):
    """Flash (no bias), memory-efficient and cuDNN attention: (output, logsumexp, ...)."""
    a = _checked(func, args, kwargs)
    causal, scale = a["is_causal"], a["scale"]

    def compute(h):
        q = h["query"]
        return attention_forward(q, h["key"], h["value"], h.get("attn_bias"), causal, _scale(q, scale))
    return _run(me, func, args, kwargs, compute, (0, 1))


@register(aten._scaled_dot_product_flash_attention_backward.default,
          aten._scaled_dot_product_efficient_attention_backward.default,
          aten._scaled_dot_product_cudnn_attention_backward.default)
def _backward(me, func, args, kwargs):
    """Their backwards: (grad_query, grad_key, grad_value[, grad_bias]) from the forward's out and logsumexp, whichever
    layout it was kept in (flash (B, H, L); cuDNN (B, H, L, 1); efficient (B, H, L padded to 32))."""
    a = _checked(func, args, kwargs)
    causal, scale = a["is_causal"], a["scale"]

    def compute(h):
        q, lse = h["query"], h["logsumexp"]
        if lse.dim() == 4:
            lse = lse[..., 0]
        go = h["grad_out"] if "grad_out" in h else h["grad_out_"]
        return attention_backward(go, q, h["key"], h["value"], h["out"], lse[..., : q.shape[2]],
                                  h.get("attn_bias"), causal, _scale(q, scale))
    return _run(me, func, args, kwargs, compute, (0, 1, 2))
