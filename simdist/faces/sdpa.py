"""`scaled_dot_product_attention` on a simulated GPU runs the kernel a GPU picks.

On a GPU, `F.scaled_dot_product_attention` asks the CUDA backend chooser (`_fused_sdp_choice`) and runs one fused
kernel: cuDNN attention, flash attention or memory-efficient attention, else the math composite
(aten/src/ATen/native/transformers/attention.cpp `scaled_dot_product_attention`, cuda/sdp_utils.cpp
`select_sdp_backend`). A CPU build has no CUDA chooser, so on simulated CUDA tensors torch would always take the
math composite: other ops on the streams than a GPU runs (witness op indices off), and code that works on a GPU
fails (DTensor's attention: the math path makes a plain causal-mask tensor, "got mixed torch.Tensor and
DTensor"; DTensor has sharding rules for the fused kernels only).

The chooser below is the reference GPU's: an H200 (sm90) with torch 2.11 + CUDA 13.0 and cuDNN 9.19, measured
there over 240 input kinds on 2026-12-02 (docs/gpu/sdp-choice-2026-12-02.json; tests/test_sdpa.py checks every
case). With cuDNN > 9.15 on sm90 torch puts cuDNN first (sdp_utils.cpp `check_prefer_cudnn_attention`) unless
TORCH_CUDNN_SDPA_DEPRIORITIZED=1 or the program set its own order (`sdpa_kernel(..., set_priority=True)`); the
backend switches of `torch.backends.cuda` / `torch.nn.attention.sdpa_kernel` are honoured.

Dropout (dropout_p > 0) keeps the math path: a fused kernel's dropout mask comes from its own Philox stream,
which simdist does not model (the math path's dropout draws from the simulated generator, and its backward uses
that same mask). Inputs the chooser does not consider (nested tensors, not 4-d) keep torch's own function.
"""
from __future__ import annotations

import os

import torch

from .autocast import lower_precision_fp

MATH, FLASH, EFFICIENT, CUDNN = 0, 1, 2, 3
_DEFAULT_ORDER = [1, 2, 0, 3, 4]  # torch's order before the CUDA chooser first runs (at::Context)
_CUDNN_FIRST = [CUDNN, FLASH, EFFICIENT, MATH]
_LOW = (torch.float16, torch.bfloat16)

_orig_sdpa = torch.nn.functional.scaled_dot_product_attention


def _enabled():
    b = torch.backends.cuda
    return {MATH: b.math_sdp_enabled(), FLASH: b.flash_sdp_enabled(), EFFICIENT: b.mem_efficient_sdp_enabled(),
            CUDNN: b.cudnn_sdp_enabled()}


def _order():
    order = list(torch._C._get_sdp_priority_order()) if hasattr(torch._C, "_get_sdp_priority_order") else None
    if order is None or order == _DEFAULT_ORDER:
        if os.environ.get("TORCH_CUDNN_SDPA_DEPRIORITIZED", "") not in ("1", "true", "True", "ON", "on"):
            return _CUDNN_FIRST
        return [FLASH, EFFICIENT, MATH, CUDNN]
    return [int(b) for b in order]


def _heads_ok(q, k, v, enable_gqa, supports_gqa):
    hq, hk, hv = q.shape[1], k.shape[1], v.shape[1]
    if hq == hk == hv:
        return True
    return supports_gqa and enable_gqa and hk == hv and hq % hk == 0


def _last_stride_one(ts, ignore_singleton):
    return all(t.stride(-1) == 1 or (ignore_singleton and t.shape[-1] == 1) for t in ts)


def _can_flash(q, k, v, mask, dropout_p, causal, enable_gqa):
    d = q.shape[-1]
    return (mask is None and q.dtype in _LOW and d == k.shape[-1] == v.shape[-1] and d <= 256
            and not (causal and q.shape[2] != k.shape[2])
            and _heads_ok(q, k, v, enable_gqa, True) and _last_stride_one((q, k, v), True))


def _can_cudnn(q, k, v, mask, dropout_p, causal, enable_gqa):
    dqk, dv = q.shape[-1], v.shape[-1]
    if torch.are_deterministic_algorithms_enabled() and not torch.is_deterministic_algorithms_warn_only_enabled():
        return False
    return (q.dtype in _LOW and dqk % 8 == 0 and dv % 8 == 0 and dqk <= 256 and dv <= 256 and k.shape[2] != 1
            and not (dropout_p > 0 and q.shape[2] == 1)
            and _heads_ok(q, k, v, enable_gqa, True) and _last_stride_one((q, k, v), True))


def _can_efficient(q, k, v, mask, dropout_p, causal, enable_gqa):
    align = 8 if q.dtype in _LOW else 4  # sdp_utils.cpp minimum_gemm_alignment on sm80+: 128 bits
    dqk, dv = q.shape[-1], v.shape[-1]
    return (q.dtype in _LOW + (torch.float32,) and dqk == k.shape[-1] and dqk % align == 0 and dv % align == 0
            and _heads_ok(q, k, v, enable_gqa, False) and _last_stride_one((q, k, v), False))


_CAN = {FLASH: _can_flash, CUDNN: _can_cudnn, EFFICIENT: _can_efficient}


def gpu_sdp_choice(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """The SDPBackend (as an int: 0 math, 1 flash, 2 efficient, 3 cudnn) the reference GPU runs for these
    inputs; raises RuntimeError as torch does when every backend is off or unfit."""
    q, k, v = query, key, value
    fused_ok = (q.dim() == k.dim() == v.dim() == 4 and not (q.is_nested or k.is_nested or v.is_nested)
                and q.dtype == k.dtype == v.dtype and q.shape[0] == k.shape[0] == v.shape[0]
                and q.shape[2] > 0 and k.shape[2] > 0 and q.shape[-1] > 0 and v.shape[-1] > 0)
    enabled = _enabled()
    for backend in _order():
        if not enabled.get(backend, False):
            continue
        if backend == MATH:
            return MATH
        if fused_ok and backend in _CAN and _CAN[backend](q, k, v, attn_mask, dropout_p, is_causal, enable_gqa):
            return backend
    raise RuntimeError("No available kernel. Aborting execution.")


def _bool_mask(mask, dtype, neg, on_device=True):
    """attention.cpp convert_boolean_attn_mask(_cudnn): a bool mask becomes an additive one (the cuDNN variant
    uses -65504 for -inf and a host zero)."""
    if mask is None or mask.dtype != torch.bool:
        return mask
    zero = torch.scalar_tensor(0.0, dtype=dtype, device=mask.device) if on_device else torch.scalar_tensor(0.0, dtype=dtype)
    return torch.where(mask.logical_not(), neg, zero)


def _pad_last(t, n):
    r = t.shape[-1] % n
    return t if r == 0 else torch.nn.functional.pad(t, (0, n - r))


def _grad_needed(q, k, v):
    return torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)


@lower_precision_fp  # autocast_mode.cpp casts scaled_dot_product_attention's arguments before its kernel runs
def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                 enable_gqa=False):
    """F.scaled_dot_product_attention inside a run: the fused kernel the GPU picks for simulated CUDA tensors
    (attention.cpp's dispatch, step by step), torch's own function otherwise."""
    q, k, v = query, key, value
    if (not isinstance(q, torch.Tensor) or q.device.type != "cuda" or dropout_p > 0 or q.dim() != 4
            or q.is_nested):
        return _orig_sdpa(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale,
                          enable_gqa=enable_gqa)
    backend = gpu_sdp_choice(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    aten = torch.ops.aten
    if backend == CUDNN:
        mask = _bool_mask(attn_mask, q.dtype, -65504.0, on_device=False)
        return aten._scaled_dot_product_cudnn_attention(q, k, v, mask, _grad_needed(q, k, v), dropout_p, is_causal,
                                                        False, scale=scale)[0]
    if backend == FLASH:
        d = q.shape[-1]
        og_scale = scale if scale is not None else d ** -0.5  # calculate_scale of the unpadded head dim
        out = aten._scaled_dot_product_flash_attention(_pad_last(q, 8), _pad_last(k, 8), _pad_last(v, 8), dropout_p,
                                                       is_causal, False, scale=og_scale)[0]
        return out if out.shape[-1] == d else out[..., :d]  # post_process_flash_output
    if backend == EFFICIENT:
        mask = _bool_mask(attn_mask, q.dtype, float("-inf"))
        if mask is not None:  # preprocess_mask: aligned to 8 elements, expanded to (B, H, L, S)
            if not (all(s % 8 == 0 for s in mask.stride()[:-1]) and mask.stride(-1) == 1):
                n = mask.shape[-1]
                mask = torch.nn.functional.pad(mask, (0, 8 - n % 8))[..., :n]
            mask = mask.expand(q.shape[0], q.shape[1], q.shape[2], k.shape[2])
        return aten._scaled_dot_product_efficient_attention(q, k, v, mask, _grad_needed(q, k, v), dropout_p,
                                                            is_causal, scale=scale)[0]
    return _orig_sdpa(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale,
                      enable_gqa=enable_gqa)


_orig_choice = torch._fused_sdp_choice


def fused_sdp_choice(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                     enable_gqa=False):
    """torch._fused_sdp_choice inside a run: the reference GPU's choice for simulated CUDA tensors."""
    if isinstance(query, torch.Tensor) and query.device.type == "cuda":
        return gpu_sdp_choice(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    return _orig_choice(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                        scale=scale, enable_gqa=enable_gqa)


def sdpa_patches():
    return [(torch.nn.functional, "scaled_dot_product_attention", scaled_dot_product_attention),
            (torch._C._nn, "scaled_dot_product_attention", scaled_dot_product_attention),
            (torch, "_fused_sdp_choice", fused_sdp_choice)]
