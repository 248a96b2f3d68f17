"""float32 matrix products under TF32, as cuBLAS computes them.

With `torch.backends.cuda.matmul.allow_tf32 = True`, `torch.set_float32_matmul_precision("high")` or
`("medium")` (or `torch.backends.cuda.matmul.fp32_precision = "tf32"`), PyTorch lets cuBLAS use TF32 tensor cores
for float32 GEMMs (aten/src/ATen/cuda/CUDABlas.cpp: CUBLAS_TF32_TENSOR_OP_MATH / CUBLAS_COMPUTE_32F_FAST_TF32):
each operand is rounded to TF32 (float32's exponent, a 10-bit mantissa) and the products are accumulated in
float32. Measured on an H200 (ci/gpu_d_facts.py tf32 section, docs/gpu/d-series-facts-2026-12-02.json): a
64x512 @ 512x48 mm, linear and bmm come within 2e-5 of the float64 product of operands rounded to nearest (ties to
even), 0.023 from the exact product, under 'high' and 'medium' alike; by default they are exact float32.

Here the operands are rounded the same way and multiplied by the CPU kernel at its full float32 precision (the
CPU's own 'medium' computes in bfloat16, which a GPU never does). The accumulation order is the CPU's, so the
values are within float32 rounding of a GPU's, not its bits. gemv (mv, addmv, a matrix-vector matmul) and dot stay
exact, as cuBLAS's gemv has no tensor-core path; convolutions are not rounded (cuDNN showed no TF32 rounding for
the measured shape, although cudnn.allow_tf32 is on by default); complex64 GEMMs are not modelled.
"""
from __future__ import annotations

import torch

from ..dispatch import _MISS, _fast_functional, _functional, _inplace
from ..op_info import op_info
from ..op_rules import register

aten = torch.ops.aten

# op -> the positions of its two matrix operands
_OPERANDS = {aten.mm.default: (0, 1), aten.bmm.default: (0, 1), aten.addmm.default: (1, 2),
             aten.baddbmm.default: (1, 2), aten.addbmm.default: (1, 2)}
_INPLACE = {aten.addmm_.default: (1, 2), aten.baddbmm_.default: (1, 2), aten.addbmm_.default: (1, 2)}


def round_to_tf32(t):
    """float32 -> the nearest TF32 value (ties to even), still a float32 tensor; NaN stays NaN."""
    i = t.view(torch.int32)
    r = ((i + (0xFFF + ((i >> 13) & 1))) & ~0x1FFF).view(torch.float32)
    return torch.where(torch.isnan(t), t, r)


def _tf32_kernel(func, operands):
    def run(*args, **kwargs):
        args = list(args)
        for p in operands:
            args[p] = round_to_tf32(args[p])
        if torch.get_float32_matmul_precision() == "highest":
            return func(*args, **kwargs)
        old = torch.get_float32_matmul_precision()
        torch.set_float32_matmul_precision("highest")  # (the program's setting, for the CPU kernel's float32)
        try:
            return func(*args, **kwargs)
        finally:
            torch.set_float32_matmul_precision(old)
    return run


def _float32_operands(args, operands):
    return all(p < len(args) and isinstance(args[p], torch.Tensor) and args[p].dtype == torch.float32
               for p in operands)


@register(*_OPERANDS, *_INPLACE)
def _gemm(me, func, args, kwargs):
    inplace = func in _INPLACE
    operands = (_INPLACE if inplace else _OPERANDS)[func]
    path = _inplace if inplace else _functional
    info = op_info(func)
    if torch.backends.cuda.matmul.allow_tf32 and _float32_operands(args, operands):
        return path(me, func, info, args, kwargs, kernel=_tf32_kernel(func, operands))
    if not inplace and not kwargs:  # the op's fast path, as without this rule (its output-layout cache knows no flags)
        info.func = func
        r = _fast_functional(me, info, args)
        if r is not _MISS:
            return r
    return path(me, func, info, args, kwargs)
