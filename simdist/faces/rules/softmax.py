"""Op rules for softmax and log_softmax of float16 inputs computed in float32 (half_to_float), a CUDA-only kernel
contract.

Rule (aten/src/ATen/native/SoftMax.cpp `softmax(input, dim, dtype)`: `if (input_.is_cuda() &&
input_.scalar_type() == ScalarType::Half && dtype == ScalarType::Float) return at::_softmax(input_, dim_, true)`,
the same for log_softmax; SoftMax.cu `host_softmax(..., half_to_float, ...)` reads the half input and writes a
float result, and the backward `_softmax_backward_data(grad (float), output (float), dim, input_dtype=Half)`
returns a Half gradient): `x.softmax(-1, dtype=torch.float32)` of a float16 tensor on a GPU is one kernel with
half_to_float=True, which the CPU kernels refuse ("softmax with half to float conversion is not supported on
CPU"). simdist raised that error at the next synchronization for every such softmax (found by the differential
tier). The kernel here widens the input to float32 first, as the CPU path of the same call does
(`input.to(dtype)` then `_softmax(..., false)`); the backward computes in float32 and narrows the gradient to
float16. One kernel on the current stream each, with the meta kernel's output layout.
"""
from __future__ import annotations

import torch

from ...engine.launch import launch
from ..dispatch import _functional, _nbytes, _out_specs, _usable, _unwrap, allocate
from ..op_info import op_info
from ..op_rules import register

aten = torch.ops.aten
_FORWARD = (aten._softmax.default, aten._log_softmax.default)
_BACKWARD = (aten._softmax_backward_data.default, aten._log_softmax_backward_data.default)


def _positional(func, args, kwargs):
    if kwargs:
        names = [a.name for a in func._schema.arguments]
        args = tuple(args) + tuple(kwargs[n] for n in names[len(args):] if n in kwargs)
    return tuple(args)


def _one_kernel(me, func, args, compute):
    info = op_info(func)
    unwrapped = _unwrap(me, args, {}, True)
    _usable(unwrapped.sims)
    dev = unwrapped.dev
    specs, _ = _out_specs(func, args, {}, unwrapped.key)  # (meta: float32 forward, float16 backward)
    stream = me.current_stream(dev.index)
    out = allocate(dev, stream, *specs[0])
    oi = out._inner
    call_args = unwrapped.args

    def fn():
        oi.copy_(compute(*call_args))

    launch(me, stream, info.name, "kernel", fn, unwrapped.sims, (out,), _nbytes(unwrapped.sims) + out._alloc.nbytes,
           skip=4)
    return out


@register(*_FORWARD)
def _softmax_half_to_float(me, func, args, kwargs):
    args = _positional(func, args, kwargs)
    if not args[2]:
        return _functional(me, func, op_info(func), args, {})
    return _one_kernel(me, func, args, lambda x, dim, _h: func(x.to(torch.float32), dim, False))


@register(*_BACKWARD)
def _softmax_backward_half(me, func, args, kwargs):
    args = _positional(func, args, kwargs)
    grad, input_dtype = args[0], args[3]
    if grad.dtype == input_dtype:
        return _functional(me, func, op_info(func), args, {})
    return _one_kernel(me, func, args, lambda g, o, dim, dt: func(g, o, dim, g.dtype).to(dt))
