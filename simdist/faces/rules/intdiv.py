"""Op rules for integer division by zero, which a GPU computes and a CPU refuses.

The CPU kernels raise `RuntimeError: ZeroDivisionError` for an integer division (div with rounding_mode 'trunc' or
'floor', floor_divide, remainder, fmod) by zero. A CUDA kernel raises nothing: it computes C++'s `a / b` and
`a % b` (aten/src/ATen/native/cuda/BinaryDivTruncKernel.cu, BinaryDivFloorKernel.cu with c10's
div_floor_integer, BinaryRemainderKernel.cu), whose result the hardware defines. So a masked pattern such as
`torch.where(d != 0, n // d, 0)`, valid on a GPU, failed under simdist. Measured on an H200 (torch 2.11, CUDA 13;
every dtype, op and numerator sign, tensor and scalar divisors, in place or not, `.gpudiff/facts2.py` of the
differential tier's session):

- `a / 0` and `a % 0` (trunc division, fmod, remainder): all bits set in the dtype (-1; 255 for uint8) for every
  dtype but int64; for int64, 0xFFFFFFFF when 0 <= a < 2**32 (the 32-bit unsigned fast path of 64-bit division)
  and -1 otherwise;
- floor division (rounding_mode='floor', floor_divide, //): div_floor_integer subtracts one when a < 0 (the signs
  of a and 0 differ and the remainder is not zero), so -2 there, and the truncating result otherwise.

The kernel here runs the CPU op with every zero divisor replaced by one, then writes those positions with the
GPU's values; without a zero divisor it is the CPU op itself. Float division is left alone (IEEE inf / nan).
"""
from __future__ import annotations

import torch

from ..dispatch import _functional, _inplace, _sim_of
from ..op_info import op_info
from ..op_rules import register

aten = torch.ops.aten

_FLOOR = "floor"
# op -> (in place, how it rounds: "trunc" / "floor" / a fixed one, dividend position, divisor position)
_OPS = {}
for _name, _ov, _inpl in (("div", "Tensor_mode", False), ("div", "Scalar_mode", False), ("div_", "Tensor_mode", True),
                          ("div_", "Scalar_mode", True)):
    _OPS[getattr(getattr(aten, _name), _ov)] = (_inpl, None, 0, 1)
for _name, _ov, _inpl in (("floor_divide", "default", False), ("floor_divide", "Scalar", False),
                          ("floor_divide_", "Tensor", True), ("floor_divide_", "Scalar", True)):
    _OPS[getattr(getattr(aten, _name), _ov)] = (_inpl, _FLOOR, 0, 1)
for _name, _ov, _inpl in (("remainder", "Tensor", False), ("remainder", "Scalar", False),
                          ("remainder", "Scalar_Tensor", False), ("remainder_", "Tensor", True),
                          ("remainder_", "Scalar", True), ("fmod", "Tensor", False), ("fmod", "Scalar", False),
                          ("fmod_", "Tensor", True), ("fmod_", "Scalar", True)):
    _OPS[getattr(getattr(aten, _name), _ov)] = (_inpl, "mod", 0, 1)


def _dtype_of(a):
    return _sim_of(a).dtype if isinstance(a, torch.Tensor) else None


def _integral_result(args):
    a, b = args[0], args[1]
    try:
        dt = torch.result_type(a if not isinstance(a, torch.Tensor) else torch.empty((), dtype=_dtype_of(a)),
                               b if not isinstance(b, torch.Tensor) else torch.empty((), dtype=_dtype_of(b)))
    except Exception:  # noqa: BLE001 - torch refuses the pair: the generic path raises its error
        return None
    return dt if not dt.is_floating_point and not dt.is_complex and dt is not torch.bool else None


def gpu_quotient_by_zero(a, dtype, floor):
    """What an H200 gives for a / 0 (and a % 0) elementwise, a being the dividend in the computation's dtype."""
    if dtype is torch.int64:
        q = torch.where((a >= 0) & (a <= 0xFFFFFFFF), torch.tensor(0xFFFFFFFF, dtype=dtype), torch.tensor(-1, dtype=dtype))
    else:
        q = torch.full_like(a, -1, dtype=torch.int64).to(dtype)  # (-1 wraps to 255 in uint8)
    if floor:
        q = torch.where(a < 0, q - 1, q)
    return q


def _kernel(func, rounding, dtype, inplace):
    def run(*args, **kwargs):
        a, b = args[0], args[1]
        bt = b if isinstance(b, torch.Tensor) else torch.tensor(b)
        zero = bt == 0
        if not bool(zero.any()):
            return func(*args, **kwargs)
        mode = kwargs.get("rounding_mode", args[2] if len(args) > 2 else None) if rounding is None else rounding
        at = a if isinstance(a, torch.Tensor) else torch.tensor(a)
        shape = torch.broadcast_shapes(tuple(at.shape), tuple(bt.shape))
        dividend = at.to(dtype).expand(shape).clone()
        mask = zero.expand(shape)
        safe = torch.where(zero, torch.ones((), dtype=bt.dtype), bt)
        res = func(a, safe if isinstance(b, torch.Tensor) else safe.item(), *args[2:], **kwargs)
        model = gpu_quotient_by_zero(dividend, dtype, mode == _FLOOR)
        target = a if inplace else res
        target[mask] = model[mask].to(target.dtype)
        return target
    return run


@register(*_OPS)
def _integer_division(me, func, args, kwargs):
    inplace, rounding, _, _ = _OPS[func]
    info = op_info(func)
    dtype = _integral_result(args) if len(args) > 1 else None
    if rounding is None and dtype is not None:
        mode = kwargs.get("rounding_mode", args[2] if len(args) > 2 else None)
        if mode not in ("trunc", "floor"):
            dtype = None  # true division: a float result
    kernel = None if dtype is None else _kernel(func, rounding, dtype, inplace)
    if inplace:
        return _inplace(me, func, info, args, kwargs, kernel=kernel)
    return _functional(me, func, info, args, kwargs, kernel=kernel)


# --- histc of integer tensors -----------------------------------------------------------------------------------
# CUDA implements histc for integer dtypes (aten/src/ATen/native/cuda/SummaryOps.cu, the result in the input's
# dtype); the CPU kernel has none ('"histogram_cpu" not implemented for 'Int''), so simdist refused what a GPU
# computes. The bin of an element, (x - min) * bins / (max - min), clamped to the last bin, is the same computed in
# float64 for integers below 2**53; measured on an H200: histc of int32 [0, 1, 5, 9, 9] with 4 bins over [0, 9] is
# [2, 0, 1, 2], int64 with 3 bins and the data's range [2, 1, 2], uint8 5 bins over [0, 10] [2, 0, 1, 0, 2].
def _histc_kernel(x, bins=100, min=0, max=0):  # noqa: A002 - histc's own argument names
    return torch.histc(x.to(torch.float64), bins, min, max).to(x.dtype)


# CUDA's histc dispatches on AT_DISPATCH_ALL_TYPES (and refuses Half by name first): bool, uint16 / 32 / 64,
# bfloat16 and complex raise at the call on an H200 (ci/gpu_d_facts.py "dtype" section), where the CPU computed them
_HISTC_TYPES = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float32, torch.float64)


@register(aten.histc.default)
def _histc(me, func, args, kwargs):
    x = _sim_of(args[0])
    if x.dtype is torch.float16:
        raise RuntimeError("HalfTensor is not supported")
    if x.dtype not in _HISTC_TYPES:
        from .cuda_dtypes import refusal
        raise refusal("histc", x.dtype)
    if x.dtype.is_floating_point:
        return _functional(me, func, op_info(func), args, kwargs)
    from ..dispatch import _nbytes, _unwrap, allocate
    from ...engine.launch import launch
    bins = args[1] if len(args) > 1 else kwargs.get("bins", 100)
    unwrapped = _unwrap(me, args, kwargs, False)
    dev = unwrapped.dev
    stream = me.current_stream(dev.index)
    out = allocate(dev, stream, (bins,), (1,), x.dtype)
    oi = out._inner
    call_args, call_kwargs = unwrapped.args, unwrapped.kwargs
    launch(me, stream, "histc", "kernel", lambda: oi.copy_(_histc_kernel(*call_args, **call_kwargs)), unwrapped.sims,
           (out,), _nbytes(unwrapped.sims) + out._alloc.nbytes, skip=4)
    return out
