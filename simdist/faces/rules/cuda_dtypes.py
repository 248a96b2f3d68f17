"""Dtypes a GPU's kernels implement, where the CPU kernels simdist runs implement others (notes d18's dtype table).

A CUDA kernel dispatches on its dtype with AT_DISPATCH_* macros whose type lists are not the CPU kernel's: the
barebones unsigned types (uint16 / uint32 / uint64), float8 and complex32 have far fewer CUDA kernels (a
dtype outside the list raises NotImplementedError '"<kernel>" not implemented for '<Type>'' at the call), and a
few data-movement kernels exist on CUDA only for them (flip, gather, scatter: AT_DISPATCH_V2 with
AT_BAREBONES_UNSIGNED_TYPES / float8 / kComplexHalf). Measured on an H200 (torch 2.11, CUDA 13: ci/gpu_d_facts.py
"dtype" section, 84 ops x 18 dtypes, docs/gpu/d-series-facts-2026-12-02.json; tests/test_gpu_dtype_facts.py
compares every fact).

- Refused as the GPU refuses them, where simdist's CPU kernel ran: the table below (kernel name and dtypes
  per aten op, the dtype the kernel dispatches on being the result's, or the input's for any / all).
  Raised where simdist reads the op's output spec (a spec fix, once per call; an accepted signature keeps the
  fast path). In-place forms (mul_, abs_, ...) are not covered.
- Computed where the GPU computes them and the CPU kernel refuses: abs of bool (its input's values); flip,
  gather and scatter of uint16 / 32 / 64, float8 and complex32 move bits only, so the kernel runs on the bytes
  viewed as a signed integer of the same width (bit-exact).
- Not modelled: complex32 arithmetic (div, sqrt, exp, log, sin, tanh, sigmoid, pow, sum, prod, lerp, rsqrt; CUDA
  computes them in complex<float>): simdist refuses them with the CPU kernel's NotImplementedError.
"""
from __future__ import annotations

import torch

from ..dispatch import _functional, _inplace, _sim_of
from ..op_info import op_info
from ..op_rules import register, register_spec_fix

aten = torch.ops.aten

C10_NAMES = {torch.bool: "Bool", torch.uint8: "Byte", torch.int8: "Char", torch.int16: "Short", torch.int32: "Int",
             torch.int64: "Long", torch.uint16: "UInt16", torch.uint32: "UInt32", torch.uint64: "UInt64",
             torch.float16: "Half", torch.bfloat16: "BFloat16", torch.float32: "Float", torch.float64: "Double",
             torch.complex32: "ComplexHalf", torch.complex64: "ComplexFloat", torch.complex128: "ComplexDouble",
             torch.float8_e4m3fn: "Float8_e4m3fn", torch.float8_e5m2: "Float8_e5m2"}
_U = (torch.uint16, torch.uint32, torch.uint64)
_F8 = (torch.float8_e4m3fn, torch.float8_e5m2)

# aten op -> (the CUDA kernel's name in its error, dtypes it lacks (measured), whether it dispatches on the input)
_REFUSED = {
    aten.mul.Tensor: ("mul_cuda", _U + _F8, False), aten.mul.Scalar: ("mul_cuda", _U + _F8, False),
    aten.where.self: ("where_cuda", _U, False),
    aten.sort.default: ("sortKeyValueInplace", _U + _F8, False), aten.sort.stable: ("sortKeyValueInplace", _U + _F8, False),
    aten.bitwise_and.Tensor: ("bitwise_and_cuda", _U, False), aten.bitwise_and.Scalar: ("bitwise_and_cuda", _U, False),
    aten.roll.default: ("roll_cuda", _U + _F8, False),
    aten.addcmul.default: ("addcmul_cuda", (torch.complex32,), False),
    aten.abs.default: ("abs_cuda", _F8, False),
    aten.isinf.default: ("abs_cuda", (torch.float8_e5m2,), True),  # CUDA's isinf is abs(x) == inf (e4m3fn: no inf)
}
for _op in (aten.any.default, aten.any.dim, aten.any.dims):
    _REFUSED[_op] = ("or_cuda", _U + _F8 + (torch.complex32,), True)
for _op in (aten.all.default, aten.all.dim, aten.all.dims):
    _REFUSED[_op] = ("and_cuda", _U + _F8 + (torch.complex32,), True)


def refusal(kernel, dtype):
    return NotImplementedError(f'"{kernel}" not implemented for \'{C10_NAMES[dtype]}\'')


def _refuse(kernel, dtypes, on_input):
    def fix(args, kwargs, out):
        if on_input:
            dt = _sim_of(args[0]).dtype
        else:
            specs, _ = out
            dt = specs[0][2] if specs and specs[0] is not None else None
        if dt in dtypes:
            raise refusal(kernel, dt)
        return out
    return fix


for _op, (_kernel, _dts, _on_input) in _REFUSED.items():
    register_spec_fix(_op)(_refuse(_kernel, _dts, _on_input))


# --- data movement the GPU implements for dtypes the CPU kernel lacks -----------------------------------------
_BITS = {torch.uint16: torch.int16, torch.uint32: torch.int32, torch.uint64: torch.int64, torch.complex32: torch.int32,
         torch.float8_e4m3fn: torch.int8, torch.float8_e5m2: torch.int8}
_MOVES = {aten.flip.default: False, aten.gather.default: False, aten.scatter.src: False, aten.scatter_.src: True}


def _as_bits(a):
    return aten.view.dtype(a, _BITS[a.dtype]) if isinstance(a, torch.Tensor) and a.dtype in _BITS else a


@register(*_MOVES)
def _move(me, func, args, kwargs):
    dt = _sim_of(args[0]).dtype
    if dt not in _BITS:
        info = op_info(func)
        if _MOVES[func]:
            return _inplace(me, func, info, args, kwargs)
        return _functional(me, func, info, args, kwargs)
    # the same kernel on the bytes viewed as a signed integer of the width (a view: no kernel of its own)
    r = func(*[_as_bits(a) for a in args], **{k: _as_bits(v) for k, v in kwargs.items()})
    return args[0] if _MOVES[func] else aten.view.dtype(r, dt)


@register(aten.abs.default)
def _abs(me, func, args, kwargs):
    # a GPU's abs of a bool tensor gives its values (measured); the CPU kernel refuses it ('"abs_cpu" not
    # implemented for 'Bool''): a copy, one kernel
    if _sim_of(args[0]).dtype is torch.bool:
        return aten.clone.default(args[0])
    return _functional(me, func, op_info(func), args, kwargs)


def gpu_refusal(func, args, out_dtype):
    """The error a GPU raises for `func` of these arguments (out_dtype: the result's), or None: for the
    differential tier, which must not draw what a GPU refuses and the CPU computes."""
    entry = _REFUSED.get(func)
    if entry is None:
        return None
    kernel, dtypes, on_input = entry
    dt = _sim_of(args[0]).dtype if on_input else out_dtype
    return refusal(kernel, dt) if dt in dtypes else None
