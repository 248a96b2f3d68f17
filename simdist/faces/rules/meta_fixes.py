"""Corrections of meta kernels that disagree with the CPU and CUDA kernels: simdist reads an op's output shapes
and dtypes from its meta kernel (simdist/faces/dispatch.py _out_specs), so such a disagreement would be a wrong
tensor on the simulated device. Each fix is applied once per signature, where the spec is cached; the op keeps
the fast path.

- pow(bool tensor, bool exponent): the CPU and CUDA kernels return bool (the result type of a bool tensor and a
  bool scalar, torch.result_type; ATen Pow.cpp), the meta kernel int64 (it promotes the exponent as an integer).
  simdist gave an int64 tensor where a GPU gives bool (measured on an H200, torch 2.11:
  `torch.ones(3, dtype=torch.bool, device="cuda").pow(True).dtype` is torch.bool).
"""
from __future__ import annotations

import torch

from ..op_rules import register_spec_fix
from ..tensor import HostProxy, SimTensor

aten = torch.ops.aten


@register_spec_fix(aten.pow.Tensor_Scalar)
def _pow_bool_bool(args, kwargs, out):
    x = args[0]
    e = args[1] if len(args) > 1 else kwargs.get("exponent")
    if type(x) in (SimTensor, HostProxy) and x.dtype == torch.bool and isinstance(e, bool):
        specs, seq = out
        (shape, stride, _), = specs
        return [(shape, stride, torch.bool)], seq
    return out
