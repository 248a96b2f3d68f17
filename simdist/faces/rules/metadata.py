"""Op rules for ops that change metadata only (in-place views, resize_ within the allocation), record_stream and
is_pinned on simulated tensors, and the refusals: ops simdist does not model raise UnsupportedOperation rather
than compute what a GPU would not."""
from __future__ import annotations

import torch

from ...engine.errors import SimulationError, UnsupportedOperation
from ...engine.launch import launch
from ..dispatch import (_factory_device, _functional, _nbytes, _poisoned_host, _sim_of, _to_meta, _unwrap, _view,
                        allocate)
from ..op_info import op_info
from ..op_rules import register, register_namespace
from ..storage import resize_storage
from ..tensor import view_bytes
from ..tensor import HostProxy, SimTensor

aten = torch.ops.aten


@register(aten.record_stream.default)
def _record_stream(rs, func, args, kwargs):
    _sim_of(args[0])._alloc.record_stream(args[1])


@register(aten.is_pinned.default)
def _is_pinned(rs, func, args, kwargs):
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
    if off is None:
        return args, kwargs
    x = _sim_of(args[0])
    size = args[i - 2] if len(args) > i - 2 else kwargs["size"]
    stride = args[i - 1] if len(args) > i - 1 else kwargs["stride"]
    extent = 0 if any(d == 0 for d in size) else 1 + sum((d - 1) * st for d, st in zip(size, stride))
    isz = x.element_size()
    if (off + extent) * isz > x._alloc.nbytes:
        raise RuntimeError(f"setStorage: sizes {list(size)}, strides {list(stride)}, storage offset {off}, and "
                           f"itemsize {isz} requiring a storage size of {(off + extent) * isz} are out of bounds "
                           f"for storage of size {x._alloc.nbytes}")
    moved = off + (x._inner.storage_offset() - x.storage_offset())
    if in_args:
        return (*args[:i], moved, *args[i + 1:]), kwargs
    return args, {**kwargs, "storage_offset": moved}


@register(aten.as_strided.default)
def _as_strided(rs, func, args, kwargs):
    args, kwargs = _segment_offsets(func, args, kwargs)
    return _view(rs, func, op_info(func), args, kwargs)


@register(*(f for f in _OFFSET_ARG if f.__name__.startswith(("as_strided_copy", "as_strided_scatter"))))
def _as_strided_functional(rs, func, args, kwargs):
    args, kwargs = _segment_offsets(func, args, kwargs)
    return _functional(rs, func, op_info(func), args, kwargs)


def _inplace_view(rs, func, args, kwargs):
    """x.t_(), x.unsqueeze_(0)...: metadata changes on the host, at once; no device work, no bytes touched."""
    x = _sim_of(args[0])
    args, kwargs = _segment_offsets(func, args, kwargs)
    u = _unwrap(rs, args, kwargs, False)
    _set_view(x, _INPLACE_VIEWS[func](*u.args, **u.kwargs))
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


def _resize(rs, func, args, kwargs):
    """x.resize_(shape): contiguous strides from x's storage offset; when the storage is too small it grows
    first (a new block, the old bytes copied: simdist/faces/storage.py), as ATen's resize_bytes does."""
    x = _sim_of(args[0])
    shape = tuple(args[1] if len(args) > 1 else kwargs["size"])
    if kwargs.get("memory_format") not in (None, torch.contiguous_format):
        raise UnsupportedOperation(f"resize_ with memory_format={kwargs['memory_format']} is not modelled")
    n = 1
    for d in shape:
        n *= d
    isz = x.element_size()
    need = (x.storage_offset() + n) * isz
    if need > x._alloc.nbytes or x._alloc.block is None:
        resize_storage(x, need)
    stride = torch._prims_common.make_contiguous_strides_for(shape) if shape else ()
    _set_view(x, view_bytes(x._alloc, shape, stride, x.dtype, x.storage_offset()))
    return args[0]


register(aten.resize_.default)(_resize)


@register_namespace("c10d")
@register_namespace("_dtensor")
def _unsupported_collective(rs, func, args, kwargs):
    # would run locally and return one rank's data: refuse
    raise UnsupportedOperation(f"{func}: this collective op is not modelled by simdist on simulated tensors (the "
                               "torch.distributed API and torch.ops._c10d_functional are)")


def _unsupported(rs, func, args, kwargs):
    raise UnsupportedOperation(f"{func} on a simulated CUDA tensor is not modelled by simdist")


register(aten.set_.source_Storage, aten.set_.source_Storage_storage_offset, aten.set_.source_Tensor,
         aten._pin_memory.default)(_unsupported)


@register(aten._has_compatible_shallow_copy_type.default)
def _compatible_shallow_copy_type(rs, func, args, kwargs):
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
