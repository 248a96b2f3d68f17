"""Op rules for the backward of layer norm and batch norm, where the CPU kernels simdist runs and the CUDA
kernels it models disagree on their contract.

- Statistics dtype. For a bfloat16 / float16 input the CUDA kernels (and the meta kernels simdist takes output
  shapes and dtypes from) keep mean / rstd (batch norm: save_mean / save_invstd) in float32; the CPU kernels keep
  them in the input's dtype unless the parameters are float32 (ATen's mixed-type rule, `is_mixed_type` /
  `param_scalar_type` in aten/src/ATen/native/layer_norm.h and batch_norm.h), and the CPU backward refuses
  float32 statistics for a reduced-precision input ("expected scalar type BFloat16 but found Float": every
  bf16 LayerNorm / BatchNorm backward failed under simdist). simdist keeps the CUDA dtype on the device (the
  float32 tensor holds the CPU kernel's statistics exactly: a widening) and hands the CPU backward the dtype it
  expects, a narrowing that gives back exactly the CPU kernel's values, so the gradients are eager CPU's, bit
  for bit.
- output_mask. A False entry of output_mask means that gradient is not computed and the kernel returns an
  undefined tensor (None) on CPU and CUDA alike; the meta kernel of native_batch_norm_backward returns a tensor
  there, so simdist allocated a fresh (poison) tensor that the kernel never wrote and crashed copying None
  into it. Such outputs are None here.
"""
from __future__ import annotations

import torch

from ...engine.launch import launch
from ..dispatch import _nbytes, _out_specs, _usable, _unwrap, allocate
from ..op_info import op_info
from ..op_rules import register

aten = torch.ops.aten
_REDUCED = (torch.bfloat16, torch.float16)


def _cpu_stats_dtype(inp, params):
    """The dtype the CPU forward gives the statistics: float32 for a reduced-precision input whose defined
    parameters are float32 (mixed type), else the input's."""
    defined = [p for p in params if p is not None]
    if inp.dtype in _REDUCED and defined and all(p.dtype == torch.float32 for p in defined):
        return torch.float32
    return inp.dtype


def _as(t, dtype):
    return t if t is None or t.dtype == dtype else t.to(dtype)


# (position of input, positions of the parameters deciding mixed type, positions of the statistics, of the mask)
_LAYOUT = {aten.native_layer_norm_backward.default: (1, (5, 6), (3, 4), 7),
           aten.native_batch_norm_backward.default: (1, (2, 3, 4), (5, 6), 9)}


@register(*_LAYOUT)
def _norm_backward(me, func, args, kwargs):
    if kwargs:
        names = [a.name for a in func._schema.arguments]
        args = tuple(args) + tuple(kwargs[n] for n in names[len(args):] if n in kwargs)
        kwargs = {}
    args = list(args)
    i_in, i_params, i_stats, i_mask = _LAYOUT[func]
    inp = args[i_in]
    want = _cpu_stats_dtype(inp, [args[i] for i in i_params])
    cpu_args = list(args)
    for i in i_stats:
        cpu_args[i] = _as(args[i], want)  # a simulated cast: exact, the statistics came from a CPU kernel of this dtype
    info = op_info(func)
    unwrapped = _unwrap(me, tuple(cpu_args), {}, True)
    _usable(unwrapped.sims)
    dev = unwrapped.dev
    specs, _ = _out_specs(func, tuple(args), {}, unwrapped.key)  # the outputs as CUDA gives them (meta)
    mask = args[i_mask]
    stream = me.current_stream(dev.index)
    outs = [allocate(dev, stream, *s) if s is not None and m else None for s, m in zip(specs, mask)]
    inners = [o._inner if o is not None else None for o in outs]
    call_args = unwrapped.args

    def fn():
        for o, r in zip(inners, func(*call_args)):
            if o is not None:
                o.copy_(r)

    real = [o for o in outs if o is not None]
    launch(me, stream, info.name, "kernel", fn, unwrapped.sims, real, _nbytes(unwrapped.sims) + sum(o._alloc.nbytes for o in real),
           skip=4)
    return tuple(outs)


# F.rms_norm on CUDA is two fused kernels, aten._fused_rms_norm and aten._fused_rms_norm_backward (measured on an
# H200: docs/gpu/b-series-facts-2026-12-02.json rms_norm_ops; the forward reaches simdist whole through
# faces/cuda_keys.py, notes b3). The forward's CPU kernel is its CompositeImplicitAutograd decomposition
# (rms_norm_composite: float opmath, x * rstd * w rounded once), run as one kernel by the generic path. The backward
# has no CPU kernel; it is computed here by torch's own decomposition (torch/_decomp/decompositions.py
# _fused_rms_norm_backward: the same float opmath formula, cast once), as one kernel on the current stream.
def _rms_norm_backward_kernel(*args):
    from torch._decomp.decompositions import _fused_rms_norm_backward
    return _fused_rms_norm_backward(*args)


@register(aten._fused_rms_norm_backward.default)
def _fused_rms_norm_backward(me, func, args, kwargs):
    from ..dispatch import _functional
    if kwargs:
        names = [a.name for a in func._schema.arguments]
        args = tuple(args) + tuple(kwargs[n] for n in names[len(args):] if n in kwargs)
    return _functional(me, func, op_info(func), tuple(args), {}, kernel=_rms_norm_backward_kernel)
