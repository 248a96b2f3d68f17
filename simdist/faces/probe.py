"""Output specs read off the real kernel: simdist places an op's outputs from its meta kernel (dispatch.py
_out_specs), and a meta kernel can disagree with the CPU and CUDA kernels, which share their C++ (TensorIterator,
the dtype tables). Once per signature, where the spec is cached, the real op runs on zero-filled host tensors of
the arguments' shapes, strides and dtypes, and where its outputs' sizes or strides differ from the meta kernel's,
the real ones are used. Found by the differential tier (tests/test_differential.py):

- the meta kernels of elementwise ops keep a size-1 dim's stride where TensorIterator resets it (neg of a
  (1, 1, 2, 2) channels_last tensor: (4, 1, 2, 1) vs (4, 4, 2, 1)), which changes the suggested memory format of
  the result, and so the layout of what is computed from it (torch.stack of it);
- a kernel that does not implement a dtype (float8 arithmetic: `"add_stub" not implemented for
  'Float8_e4m3fn'`) is refused at the call, on the host, as a GPU refuses it, not when the kernel runs at the
  next sync.

Only small signatures are probed (arguments of at most PROBE_BYTES): a larger op keeps the meta kernel's spec
(and the fixes of rules/meta_fixes.py). Random ops are not probed (they would draw from a generator). Any other
error of the probe is ignored: on zeros, an op may refuse what its real arguments allow (a Cholesky factor).
"""
from __future__ import annotations

import torch

from .tensor import HostProxy, SimTensor

PROBE_BYTES = 1 << 16


def _size(a):
    t = type(a)
    if t is SimTensor or t is HostProxy:
        return a.numel() * a.element_size()
    if t is list or t is tuple:
        return sum(_size(x) for x in a)
    if isinstance(a, torch.Tensor):
        return a.numel() * a.element_size()
    return 0


def _zeros(a):
    t = type(a)
    if t is SimTensor or t is HostProxy:
        s = a if t is SimTensor else a._sim
        z = torch.empty_strided(tuple(s.shape), tuple(s.stride()), dtype=s.dtype)
        if z.untyped_storage().nbytes():
            torch.empty(0, dtype=torch.uint8).set_(z.untyped_storage()).zero_()
        return z
    if t is list or t is tuple:
        return t(_zeros(x) for x in a)
    return a


def _spec(r):
    return None if r is None else (tuple(r.shape), tuple(r.stride()), r.dtype)


def probe_specs(func, args, kwargs, out, random):
    """`out` (the meta kernel's [(shape, stride, dtype) | None, ...], is_seq) corrected by the real kernel's."""
    if random or (_size(args) + _size(list(kwargs.values()))) > PROBE_BYTES:
        return out
    cargs = tuple(_zeros(a) for a in args)
    ckw = {k: _zeros(v) for k, v in kwargs.items()}
    if ckw.get("device") is not None:
        ckw["device"] = torch.device("cpu")
    try:
        res = func(*cargs, **ckw)
    except NotImplementedError as e:
        if "not implemented for" in str(e):  # the kernel's dtype table refuses it: so would a GPU's, at the call
            raise
        return out
    except Exception:  # noqa: BLE001 - see the module docstring
        return out
    specs, seq = out
    real = [_spec(r) if isinstance(r, torch.Tensor) else None for r in (res if seq else (res,))]
    if len(real) != len(specs):
        return out
    # sizes and strides from the kernel; dtypes stay the meta kernel's, which are CUDA's where the two devices
    # differ (layer norm's float32 statistics of a bf16 input; rules/norms.py), and fixed by rules/meta_fixes.py
    # where the meta kernel is wrong for both
    fixed = [(r[0], r[1], s[2]) if r is not None and s is not None else s for r, s in zip(real, specs)]
    return (fixed, seq) if fixed != specs else out
