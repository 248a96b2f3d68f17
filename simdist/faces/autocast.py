"""The CUDA autocast wrapper for ops that simdist routes at Python level (notes d17).

On a GPU an aten op in autocast's lists meets its AutocastCUDA kernel before anything else
(aten/src/ATen/autocast_mode.cpp): for the lower_precision_fp list (matmul, conv, ..., scaled_dot_product_attention)
every floating CUDA argument that is not float64 is cast to the autocast dtype (`cached_cast`), and the op
runs with the AutocastCUDA key excluded, so the ops it is made of are not cast again. A function that simdist
patches in Python (F.scaled_dot_product_attention: faces/sdpa.py) replaces the aten op before the dispatcher
is reached, so it must do the autocast kernel's work itself; everything simdist handles below the dispatcher
(op rules, the generic path) is cast by torch's own autocast kernels.

Not modelled: autocast's cast cache (a leaf float32 tensor that requires grad is cast once per autocast region
and the cast reused); a routed op casts it each call, one more copy kernel than a GPU runs. The cache lives in
C++ and has no Python entry point.
"""
from __future__ import annotations

import functools

import torch

_KEY = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCUDA)


def _eligible(x):
    # autocast_mode.h is_eligible / is_autocast_eligible for CUDA: a defined floating CUDA tensor, not double
    return (isinstance(x, torch.Tensor) and x.device.type == "cuda" and x.is_floating_point()
            and x.dtype != torch.float64)


def _cast(x, dtype):
    if isinstance(x, (list, tuple)):
        return type(x)(_cast(v, dtype) for v in x)
    return x.to(dtype) if _eligible(x) and x.dtype != dtype else x


def lower_precision_fp(fn):
    """Wrap `fn` (a Python stand-in for an aten op in autocast's lower_precision_fp list) as its AutocastCUDA
    kernel: inside torch.autocast("cuda") with a CUDA tensor among the arguments, cast the eligible arguments to
    the autocast dtype and run `fn` with the AutocastCUDA key excluded (autocast_mode.h WrapFunction_)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if not torch.is_autocast_enabled("cuda"):  # off, or excluded by an enclosing autocast kernel
            return fn(*args, **kwargs)
        tensors = [a for a in list(args) + list(kwargs.values()) if isinstance(a, torch.Tensor)]
        if not any(t.device.type == "cuda" for t in tensors):  # no tensor has the AutocastCUDA key
            return fn(*args, **kwargs)
        dtype = torch.get_autocast_dtype("cuda")
        args = tuple(_cast(a, dtype) for a in args)
        kwargs = {k: _cast(v, dtype) for k, v in kwargs.items()}
        with torch._C._ExcludeDispatchKeyGuard(_KEY):
            return fn(*args, **kwargs)
    wrapper.__wrapped_autocast__ = "lower_precision_fp"
    return wrapper
