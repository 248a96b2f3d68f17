"""Op rules for ops that change metadata only (in-place views, resize_ within the allocation), record_stream and
is_pinned on simulated tensors, and the refusals: ops simdist does not model raise UnsupportedOperation rather
than compute what a GPU would not."""
from __future__ import annotations

import torch

from ...engine.errors import UnsupportedOperation
from ..dispatch import (_functional, _sim_of, _to_meta, _unwrap, _view, allocate)
from ..op_info import op_info
from ..op_rules import register, register_namespace
from ..deterministic_fill import fill_grown, fills
from ..storage import resize_storage
from ..tensor import view_bytes
from ..tensor import SimTensor

aten = torch.ops.aten


@register(aten.record_stream.default)
def _record_stream(me, func, args, kwargs):
    _sim_of(args[0])._alloc.record_stream(args[1])


@register(aten.is_pinned.default)
def _is_pinned(me, func, args, kwargs):
    return False


_INPLACE_VIEWS = {}
for _name, _ovs in (("as_strided_", ("default",)), ("t_", ("default",)), ("unsqueeze_", ("default",)),
                    ("squeeze_", ("default", "dim", "dims")), ("transpose_", ("default",)),
                    ("swapdims_", ("default",)), ("swapaxes_", ("default",)), ("detach_", ("default",))):
    _pk, _base = getattr(aten, _name, None), getattr(aten, _name[:-1], None)
    for _ov in _ovs:
        _bov = "int" if _name == "transpose_" else _ov  # aten.transpose's overload is named .int
        if _pk is not None and _base is not None and hasattr(_pk, _ov) and hasattr(_base, _bov):
            _INPLACE_VIEWS[getattr(_pk, _ov)] = getattr(_base, _bov)


# --- storage offsets -------------------------------------------------------------------------------------------
# as_strided's storage_offset counts elements from the start of the tensor's storage (ATen's setStrided); a
# simulated tensor's storage is its allocation, while the CPU view underneath counts from the start of the
# segment that holds the allocation. The argument is moved by the allocation's start, and a view past the
# storage's end is refused as torch refuses it. (torch DDP's reducer makes every bucket view this way: read
# from the segment's start, the gradients went to other memory and the all-reduce summed stale bytes.)
_OFFSET_ARG = {aten.as_strided.default: 3, aten.as_strided_.default: 3, aten.as_strided_scatter.default: 4}
if hasattr(aten, "as_strided_copy"):
    _OFFSET_ARG[aten.as_strided_copy.default] = 3


def _segment_offsets(func, args, kwargs):
    """(args, kwargs) with an explicit storage_offset moved from the storage's start to the segment's."""
    i = _OFFSET_ARG.get(func)
    if i is None:
        return args, kwargs
    in_args = len(args) > i
    off = args[i] if in_args else kwargs.get("storage_offset")
    x = _sim_of(args[0])
    size = args[i - 2] if len(args) > i - 2 else kwargs["size"]
    stride = args[i - 1] if len(args) > i - 1 else kwargs["stride"]
    # (no offset given: the tensor's own, which the CPU view underneath already counts from the segment's start;
    # the bounds are checked all the same: the segment goes on past the storage's end, into other allocations)
    own = off is None
    if own:
        off = x.storage_offset()
    extent = 0 if any(d == 0 for d in size) else 1 + sum((d - 1) * st for d, st in zip(size, stride))
    isz = x.element_size()
    if (off + extent) * isz > x._alloc.nbytes:
        raise RuntimeError(f"setStorage: sizes {list(size)}, strides {list(stride)}, storage offset {off}, and "
                           f"itemsize {isz} requiring a storage size of {(off + extent) * isz} are out of bounds "
                           f"for storage of size {x._alloc.nbytes}")
    if own:
        return args, kwargs
    moved = off + (x._inner.storage_offset() - x.storage_offset())
    if in_args:
        return (*args[:i], moved, *args[i + 1:]), kwargs
    return args, {**kwargs, "storage_offset": moved}


@register(aten.as_strided.default)
def _as_strided(me, func, args, kwargs):
    args, kwargs = _segment_offsets(func, args, kwargs)
    return _view(me, func, op_info(func), args, kwargs)


@register(*(f for f in _OFFSET_ARG if f.__name__.startswith(("as_strided_copy", "as_strided_scatter"))))
def _as_strided_functional(me, func, args, kwargs):
    args, kwargs = _segment_offsets(func, args, kwargs)
    return _functional(me, func, op_info(func), args, kwargs)


def _inplace_view(me, func, args, kwargs):
    """x.t_(), x.unsqueeze_(0)...: metadata changes on the host, at once; no device work, no bytes touched."""
    x = _sim_of(args[0])
    args, kwargs = _segment_offsets(func, args, kwargs)
    unwrapped = _unwrap(me, args, kwargs, False)
    _set_view(x, _INPLACE_VIEWS[func](*unwrapped.args, **unwrapped.kwargs))
    return args[0]


def _set_view(x, res):
    """Give simulated tensor x the sizes/strides/offset of `res` (a CPU view of its bytes) in place, keeping the
    Python object, as torch's in-place metadata ops do."""
    y = SimTensor(res, x._dev, x._alloc)
    x.data = y
    x._inner = res
    x._spec = y._spec
    x._span = None


register(*_INPLACE_VIEWS)(_inplace_view)


def _meta_like(t):
    return torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=t.dtype, device="meta")


def _restride(x, shape, stride, offset):
    """Give x these sizes, strides and storage offset (elements from its storage's start), growing the storage
    first when it is too small (a new block, the old bytes copied: simdist/faces/storage.py), as ATen's
    resize_ and set_ do (maybe_resize_storage)."""
    ext = 0 if any(d == 0 for d in shape) else 1 + sum((d - 1) * st for d, st in zip(shape, stride))
    need = (offset + ext) * x.element_size()
    if need > x._alloc.nbytes or x._alloc.block is None:
        resize_storage(x, need)
    _set_view(x, view_bytes(x._alloc, tuple(shape), tuple(stride), x.dtype, offset))


@register(aten.resize_.default, aten.resize_as_.default)
def _resize(me, func, args, kwargs):
    """x.resize_(shape[, memory_format]) and x.resize_as_(y[, memory_format]): the sizes and strides torch gives
    (its own resize_ run on a meta tensor of x's layout: contiguous, or the memory format's strides; resize_as_
    takes y's sizes, and y's suggested format for preserve_format), from x's storage offset; the storage grows
    when it is too small (ATen resize_ / resize_as_, Resize.cpp)."""
    x = _sim_of(args[0])
    m = _meta_like(x)
    rest = tuple(_to_meta(a) for a in args[1:])
    func(m, *rest, **{k: _to_meta(v) for k, v in kwargs.items()})  # torch's own checks and strides
    old = x._alloc.nbytes
    _restride(x, tuple(m.shape), tuple(m.stride()), x.storage_offset())
    if fills():
        fill_grown(me, x, old)
    return args[0]


# --- set_ --------------------------------------------------------------------------------------------------------
# Rules (ATen TensorShape.cpp set_ / set_storage_*_, c10 checkSetStorage; docs of Tensor.set_):
# x.set_(source) makes x view source's
# storage with source's sizes, strides and offset (same dtype); x.set_(storage) views a whole storage as 1-D;
# x.set_(storage, offset, size, stride) views it so, the storage growing when it is too small; x.set_() gives x
# an empty storage and size (0,). The Python object, its dtype and its version counter stay (the version counts
# the set_ itself); other tensors viewing x's old bytes keep them.
# A storage source reaches here as a tensor viewing it (Tensor.set_ in simdist/faces/tensor.py, which also grows
# the storage when asked to view past its end); a torch Storage passed to the aten op itself is refused.
@register(aten.set_.default, aten.set_.source_Tensor, aten.set_.source_Storage,
          aten.set_.source_Storage_storage_offset)
def _set(me, func, args, kwargs):
    x = args[0]
    if type(_sim_of(x)) is not SimTensor:
        raise UnsupportedOperation(f"{func}: set_ of a CPU tensor to simulated CUDA memory is not modelled by "
                                   "simdist (on a GPU the devices must match)")
    x = _sim_of(x)
    if func is aten.set_.default:
        dev = x._dev
        e = allocate(dev, me.current_stream(dev.index), (0,), (1,), x.dtype)
        _adopt(x, e._alloc, (0,), (1,), 0)
        return args[0]
    src = args[1] if len(args) > 1 else kwargs["source"]
    if type(_sim_of(src)) is not SimTensor:  # a CPU tensor or a torch Storage (a simulated one is not one)
        raise UnsupportedOperation(f"{func}: setting a simulated CUDA tensor to a CPU storage or tensor is not "
                                   "modelled by simdist (on a GPU the devices must match)")
    src = _sim_of(src)
    if src._dev is not x._dev:
        raise RuntimeError(f"Attempted to set the storage of a tensor on device \"{x.device}\" to a storage on "
                           f"different device \"{src.device}\".  This is no longer allowed; the devices must match.")
    if src.dtype != x.dtype:
        raise RuntimeError(f"Could not set tensor of type {_type_name(src.dtype)} to a tensor of type "
                           f"{_type_name(x.dtype)}")
    shape, stride, off = tuple(src.shape), tuple(src.stride()), src.storage_offset()
    _adopt(x, src._alloc, shape, stride, off)
    return args[0]


def _type_name(dtype):
    return {torch.float32: "float", torch.float64: "double", torch.float16: "c10::Half", torch.bfloat16:
            "c10::BFloat16", torch.int64: "long int", torch.int32: "int", torch.bool: "bool"}.get(dtype, str(dtype))


def _adopt(x, alloc, shape, stride, off):
    """x views `alloc` with this layout, keeping its Python object. A storage of no bytes (resized to 0) has no
    memory to view: x is then unusable until the storage grows again (rebind_views), as in torch."""
    if alloc.block is not None:
        y = SimTensor(view_bytes(alloc, shape, stride, x.dtype, off), x._dev, alloc)
    else:
        y = SimTensor(torch.empty(0, dtype=x.dtype), x._dev, alloc, False, shape, stride, off)
    x.data = y
    x._span = None


@register_namespace("c10d")
@register_namespace("_dtensor")
def _unsupported_collective(me, func, args, kwargs):
    # would run locally and return one rank's data: refuse
    raise UnsupportedOperation(f"{func}: this collective op is not modelled by simdist on simulated tensors (the "
                               "torch.distributed API and torch.ops._c10d_functional are)")


def _unsupported(me, func, args, kwargs):
    raise UnsupportedOperation(f"{func} on a simulated CUDA tensor is not modelled by simdist")


register(aten._pin_memory.default)(_unsupported)


@register(aten._has_compatible_shallow_copy_type.default)
def _compatible_shallow_copy_type(me, func, args, kwargs):
    """`t.data = other` asks this before swapping metadata: a question about tensor types, not bytes (no device
    work, no host read). Between a simulated and a CPU tensor the answer would let torch graft a CUDA-typed
    wrapper's metadata onto a CPU tensor (or the reverse), which cannot hold: refused by name. nn.Module's
    .cuda()/.to()/.cpu() do not come here (simdist/faces/patches.py keeps their Parameters another way)."""
    a, b = (_sim_of(x) for x in args[:2])
    if isinstance(a, SimTensor) != isinstance(b, SimTensor):
        raise UnsupportedOperation(
            "`t.data = other` between a CPU tensor and a simulated CUDA tensor is not modelled by simdist (torch "
            "would keep t's Python object on the other device); move modules with .cuda()/.to(), or assign a new "
            "tensor")
    return func(*(x._inner if isinstance(x, SimTensor) else x for x in (a, b)))
