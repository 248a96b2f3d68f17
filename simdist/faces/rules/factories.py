"""Op rules for ops that make tensors from metadata only: *_like / new_* allocations (no bytes read) and
lift_fresh (a constant already placed on the device)."""
from __future__ import annotations

import torch

from ..deterministic_fill import fill_new, fills
from ..dispatch import _factory_device, _sim_of, _to_meta, _unwrap, allocate
from ..op_rules import register

aten = torch.ops.aten


_EMPTY_LIKE = aten.empty_like.default
_PLAIN_KWARGS = frozenset(("dtype", "layout", "device", "pin_memory", "memory_format"))


def _contiguous_strides(shape):
    out = [1] * len(shape)
    n = 1
    for i in range(len(shape) - 1, -1, -1):
        out[i] = n
        n *= max(shape[i], 1)
    return tuple(out)


@register(aten.empty_like.default, aten.new_empty.default, aten.new_empty_strided.default)
def _empty_like(me, func, args, kwargs):
    unwrapped = _unwrap(me, args, kwargs, False)
    dev = unwrapped.dev
    tdev = kwargs.get("device")
    if tdev is not None:
        tdev = torch.device(tdev)
        if tdev.type != "cuda":  # e.g. torch.empty_like(cuda_tensor, device="cpu"): plain host memory
            shape = args[0].shape if func is aten.empty_like.default else args[1]
            return torch.empty(shape, dtype=kwargs.get("dtype") or args[0].dtype, device=tdev)
        dev = _factory_device(me, tdev)
    if func is _EMPTY_LIKE and len(args) == 1 and kwargs.keys() <= _PLAIN_KWARGS and kwargs.get("memory_format") in \
            (None, torch.preserve_format) and kwargs.get("layout") in (None, torch.strided):
        x = args[0]
        shape, stride = tuple(x.shape), tuple(x.stride())
        if stride == _contiguous_strides(shape):  # what the meta kernel below gives (the input's own strides)
            out = allocate(dev, me.current_stream(dev.index), shape, stride, kwargs.get("dtype") or x.dtype)
            if fills():
                fill_new(me, out)
            return out
    margs = tuple(_to_meta(a) for a in args)
    mk = {k: _to_meta(v) for k, v in kwargs.items()}
    mk["device"] = "meta"
    mk.pop("pin_memory", None)
    res = func(*margs, **mk)
    out = allocate(dev, me.current_stream(dev.index), tuple(res.shape), tuple(res.stride()), res.dtype)
    if fills():
        fill_new(me, out)
    return out


@register(aten.lift_fresh.default, aten.lift_fresh_copy.default)
def _lift(me, func, args, kwargs):
    return args[0]


# torch.zeros_like(x, device="cpu"), x.new_ones(..., device="cpu"): a factory that takes its metadata from a device
# tensor but is told to make a host tensor makes a plain host tensor (ATen: the device argument wins over the
# input's). simdist made a tensor on the simulated device whatever the device argument said.
_LIKE = [aten.zeros_like.default, aten.ones_like.default, aten.full_like.default, aten.new_zeros.default,
         aten.new_ones.default, aten.new_full.default, aten.rand_like.default, aten.randn_like.default,
         aten.randint_like.default, aten.randint_like.low_dtype]


@register(*[op for op in _LIKE if op is not None])
def _like_on_host(me, func, args, kwargs):
    tdev = kwargs.get("device")
    if tdev is None or torch.device(tdev).type == "cuda":
        if tdev is not None and type(args[0]) is torch.Tensor:
            # torch.zeros_like(host_tensor, device="cuda"), host.new_ones(n, device="cuda") (vLLM's CpuGpuBuffer
            # makes its device half so): only the host tensor's metadata is read, as by any factory (ATen's
            # zeros_like is empty_like(self, options).zero_(), TensorFactories.cpp), so it is one; the rule's
            # _functional, which places outputs by the simulated arguments, found none and ran the CPU build's
            # op with device="cuda": a raw NotImplementedError (notes x22)
            from ..dispatch import factory
            return factory(me, func, args, kwargs, torch.device(tdev))
        from ..dispatch import _functional
        from ..op_info import op_info
        return _functional(me, func, op_info(func), args, kwargs)
    s = _sim_of(args[0])  # only its metadata is read: a host stand-in of its layout
    stand_in = torch.empty_strided(tuple(s.shape), tuple(s.stride()), dtype=s.dtype)
    return func(stand_in, *args[1:], **kwargs)
