"""SimTensor: a tensor that says `cuda:N` and keeps its bytes in simulated device memory.

It is a wrapper subclass: the outer tensor carries the metadata user code sees
(device, shape, strides, dtype); `_inner` is a CPU view of the device
segment holding the bytes; `_alloc` keeps the allocator block alive. All ops
on it reach simdist's dispatch mode (simdist.dispatch).

A handful of Tensor methods are implemented in Python bindings that set a
CUDA device guard before dispatch (indexing, copy_, to, item...), which a CPU
build cannot do; those are overridden here and routed through the dispatcher.
"""
from __future__ import annotations

import copy
import weakref

import torch

from ..engine.context import current_rank
from ..engine.errors import UnsupportedOperation
from . import guard

_ref = weakref.ref

TENSOR_DICT = torch.Tensor.__dict__["__dict__"]  # torch.Tensor's own instance-dictionary descriptor
SIM_INTERNALS = frozenset(("_inner", "_dev", "_alloc", "_spec", "_span", "_storage"))  # a SimTensor's own


class _AttributeDict(dict):
    """`t.__dict__` of a simulated tensor: the Python attributes the program or torch gave it (a GPU tensor's
    `__dict__` is empty until then), without simdist's own (SIM_INTERNALS), which code walking a tensor's
    attributes would otherwise copy (torch.distributed.checkpoint's stager deep-copies `x.__dict__`,
    _state_dict_stager.py _offload_tensor). A dict of them at the time it was read; writes through it reach the
    tensor. Copied or pickled, it is a plain dict."""
    __slots__ = ("_real",)

    def __init__(self, real):
        dict.__init__(self, ((k, v) for k, v in real.items() if k not in SIM_INTERNALS))
        self._real = real

    def __setitem__(self, k, v):
        dict.__setitem__(self, k, v)
        self._real[k] = v

    def __delitem__(self, k):
        dict.__delitem__(self, k)
        del self._real[k]

    def update(self, *args, **kwargs):
        for k, v in dict(*args, **kwargs).items():
            self[k] = v

    def setdefault(self, k, default=None):
        if k not in self:
            self[k] = default
        return self[k]

    def pop(self, k, *default):
        if k in self:
            v = self[k]
            del self[k]
            return v
        if default:
            return default[0]
        raise KeyError(k)

    def popitem(self):
        k, v = dict.popitem(self)
        del self._real[k]
        return k, v

    def clear(self):
        for k in list(self):
            del self[k]

    def __reduce_ex__(self, proto):
        return (dict, (dict(self),))

    def __copy__(self):
        return dict(self)


def _get_attribute_dict(self):
    return _AttributeDict(TENSOR_DICT.__get__(self))


def _set_attribute_dict(self, attrs):
    """`t.__dict__ = d`: the program's attributes become d's; simdist's own stay."""
    real = TENSOR_DICT.__get__(self)
    new = dict(attrs)
    new.update((k, real[k]) for k in SIM_INTERNALS if k in real)
    TENSOR_DICT.__set__(self, new)
_router = None  # dispatch_outside of simdist/faces/dispatch.py: where ops on simulated tensors go


def set_router(fn):
    global _router
    _router = fn


_storage_of = None  # SimStorage of simdist/faces/storage.py: Tensor.untyped_storage() of a simulated tensor


def set_storage_class(cls):
    global _storage_of
    _storage_of = cls

_aten = torch.ops.aten


def _as_tuple_index(seq):
    """torch/csrc/autograd/python_variable_indexing.cpp treatSequenceAsTuple: a list index holding a tensor, a
    sequence, a slice, Ellipsis or None is a tuple of indices; any other list is one index tensor."""
    return any(isinstance(x, (torch.Tensor, list, tuple, slice)) or x is Ellipsis or x is None for x in seq)


def _list_indices_on_host(idx):
    """Python lists among the indices become host index tensors here. torch makes a list index into a tensor on
    the indexed tensor's device with the Python dispatch key excluded (internal_new_from_data), which on a CPU build
    reaches the missing CUDA backend ("Could not run 'aten::empty_strided' ... 'CUDA' backend"); advanced indexing
    with a host index tensor copies it to the device (blocking) before the kernel, as the list's tensor is."""
    if type(idx) is list:
        if _as_tuple_index(idx):
            idx = tuple(idx)
        else:
            return torch.tensor(idx)
    if type(idx) is tuple and any(type(x) is list for x in idx):
        return tuple(torch.tensor(x) if type(x) is list else x for x in idx)
    return idx


class SimTensor(torch.Tensor):
    @staticmethod
    def __new__(cls, inner, dev, alloc, requires_grad=False, shape=None, stride=None, offset=None, spec=None):
        if shape is None:  # a view: derive its metadata from the CPU view
            shape, stride = inner.shape, inner.stride()
            base = alloc.block.offset // inner.element_size() if alloc.block is not None else 0
            offset = inner.storage_offset() - base
        r = torch.Tensor._make_wrapper_subclass(cls, shape, strides=stride, storage_offset=offset,
                                                dtype=inner.dtype, device=dev.torch_device,
                                                requires_grad=requires_grad)
        r._inner = inner
        r._dev = dev
        r._alloc = alloc
        # the output-shape cache key of this argument (spec: the same tuple, when the caller has it already)
        r._spec = (shape, stride, inner.dtype) if spec is None else spec
        r._span = None  # (lo, hi, dense) bytes of the segment, when known without asking the view
        views = alloc.views
        ref = _ref(r)
        views.append(ref)  # a storage resize moves every view of the bytes (rebind_views)
        made = dev.owner.backward_made
        if made is not None:  # a backward pass may record_stream it (guard_events._record_data)
            made.append(ref)
        if len(views) > 64 and len(views) & (len(views) - 1) == 0:  # at powers of two: forget the dead
            views[:] = [v for v in views if v() is not None]
        return r

    __torch_function__ = torch._C._disabled_torch_function_impl
    __dict__ = property(_get_attribute_dict, _set_attribute_dict)  # the program's attributes, not simdist's

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        return _router(func, types, args, kwargs or {})

    def requires_grad_(self, requires_grad=True):
        # Autograd on a CUDA-typed tensor needs a CUDA device guard, which a CPU build aborts on (a hard
        # crash, not an exception). simdist's fake guard (simdist/guard.py) provides one; without it
        # simulated tensors never require grad and backward() is refused.
        if guard.available():
            return torch.Tensor.requires_grad_(self, requires_grad)
        return self

    def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
        if guard.available():
            return torch.Tensor.backward(self, gradient, retain_graph, create_graph, inputs)
        raise UnsupportedOperation("autograd (backward) on simulated CUDA tensors is not supported by simdist "
                                   f"here ({guard.reason()}); compute gradients explicitly or run the step "
                                   "outside the simulation")

    # --- methods whose Python bindings would need a real CUDA device guard ---
    # (With simdist's fake guard loaded the bindings work as they are, and they must be used when autograd
    # is recording: the HostProxy detour would drop the op from the graph.)
    def __getitem__(self, idx):
        idx = _list_indices_on_host(idx)
        if guard._lib is not None:
            return torch.Tensor.__getitem__(self, idx)
        return _proxied(torch.Tensor.__getitem__, self, idx)

    def __setitem__(self, idx, value):
        idx = _list_indices_on_host(idx)
        if guard._lib is not None:
            torch.Tensor.__setitem__(self, idx, value)
            return
        _proxied(torch.Tensor.__setitem__, self, idx, value)

    def copy_(self, src, non_blocking=False):
        return _aten.copy_.default(self, src, non_blocking)

    def to(self, *args, **kwargs):
        return tensor_to(self, *args, **kwargs)

    def cuda(self, device=None, non_blocking=False, memory_format=torch.preserve_format):
        dev = torch.device("cuda", device) if isinstance(device, int) else torch.device(device or "cuda")
        return tensor_to(self, dev, non_blocking=non_blocking, memory_format=memory_format)

    def cpu(self, memory_format=torch.preserve_format):
        return tensor_to(self, torch.device("cpu"), memory_format=memory_format)

    def item(self):
        return _aten._local_scalar_dense.default(self)

    def __invert__(self):
        # torch's binding checks first (python_variable_methods.cpp THPVariable_invert), on CPU and CUDA alike
        if self.dtype.is_floating_point or self.dtype.is_complex:
            raise TypeError("~ (operator.invert) is only implemented on integer and Boolean-type tensors")
        return torch.bitwise_not(self)

    def contiguous(self, memory_format=torch.contiguous_format):
        if self.is_contiguous(memory_format=memory_format):
            return self
        return _aten.clone.default(self, memory_format=memory_format)

    def nonzero(self, *, as_tuple=False):
        if as_tuple:
            return tuple(_aten.nonzero.default(self).unbind(1))
        return _aten.nonzero.default(self)

    def new_tensor(self, data, dtype=None, device=None, requires_grad=False):
        return torch.tensor(data, dtype=dtype or self.dtype, device=device or self.device)

    def type(self, dtype=None, non_blocking=False, **kwargs):
        if dtype is None:
            return {torch.float32: "torch.cuda.FloatTensor", torch.float64: "torch.cuda.DoubleTensor",
                    torch.float16: "torch.cuda.HalfTensor", torch.bfloat16: "torch.cuda.BFloat16Tensor",
                    torch.int64: "torch.cuda.LongTensor", torch.int32: "torch.cuda.IntTensor",
                    torch.bool: "torch.cuda.BoolTensor", torch.uint8: "torch.cuda.ByteTensor"}.get(
                        self.dtype, f"torch.cuda.{self.dtype}")
        return self.to(dtype, non_blocking=non_blocking)

    def tolist(self):
        return self.cpu().tolist()

    def __float__(self):
        return float(self.item())

    def __int__(self):
        return int(self.item())

    def __index__(self):
        return int(self.item())

    def __bool__(self):
        if self.numel() != 1:
            raise RuntimeError("Boolean value of Tensor with more than one value is ambiguous")
        return bool(self.item())

    def numpy(self, *, force=False):
        raise TypeError(f"can't convert {self.device} device type tensor to numpy. "
                        "Use Tensor.cpu() to copy the tensor to host memory first.")

    def __repr__(self, *, tensor_contents=None):
        """What printing a CUDA tensor writes on a GPU (torch/_tensor_str.py _str_intern, for a dense tensor): the
        values, read from the device as printing does, formatted as torch formats them, then the suffixes in
        torch's order, wrapped at its line width: device (unless it is the default device), dtype, size (of an
        empty tensor, or with edgeitems 0), then grad_fn or requires_grad=True (of this tensor, not of a host
        copy), tangent; a parameter as nn.Parameter.__repr__ writes it ("Parameter containing:"). It was the
        repr of a host copy with the device appended: every tensor that required grad printed
        `grad_fn=<ToCopyBackward0>` (a leaf too) and the device last (notes z1)."""
        from torch._tensor_str import PRINT_OPTS, _add_suffixes, _tensor_str
        with torch.no_grad():
            host = self.detach().cpu()
        prefix = "tensor("
        indent = len(prefix)
        suffixes = []
        dev = self.device
        try:
            here = torch.cuda.current_device()
        except Exception:  # noqa: BLE001 - outside a rank: no current simulated device
            here = None
        if dev.type != torch._C._get_default_device() or (dev.type == "cuda" and here != dev.index):
            suffixes.append(f"device='{dev}'")
        default_complex = torch.cdouble if torch.get_default_dtype() == torch.double else torch.cfloat
        has_default_dtype = self.dtype in (torch.get_default_dtype(), default_complex, torch.int64, torch.bool)
        if self.numel() == 0:
            if self.dim() != 1:
                suffixes.append("size=" + str(tuple(self.shape)))
            if self.dtype != torch.get_default_dtype():
                suffixes.append("dtype=" + str(self.dtype))
            contents = "[]"
        else:
            if not PRINT_OPTS.edgeitems:
                suffixes.append("size=" + str(tuple(self.shape)))
            if not has_default_dtype:
                suffixes.append("dtype=" + str(self.dtype))
            contents = _tensor_str(host, indent) if tensor_contents is None else None
        if tensor_contents is not None:
            contents = tensor_contents
        try:
            grad_fn = self.grad_fn
            grad_fn_name = None if grad_fn is None else type(grad_fn).__name__
            if grad_fn_name == "CppFunction":
                grad_fn_name = grad_fn.name().rsplit("::", 1)[-1]
        except RuntimeError:  # (torch: a no-grad view modified in place in no-grad mode, pytorch#99968)
            grad_fn_name = "Invalid"
        if grad_fn_name is not None:
            suffixes.append(f"grad_fn=<{grad_fn_name}>")
        elif self.requires_grad:
            suffixes.append("requires_grad=True")
        _primal, tangent = torch.autograd.forward_ad.unpack_dual(self)
        if tangent is not None:
            suffixes.append(f"tangent={tangent}")
        text = _add_suffixes(prefix + contents, suffixes, indent, force_newline=False)
        if isinstance(self, torch.nn.Parameter):
            text = "Parameter containing:\n" + text
        return text

    def __format__(self, spec):
        if self.dim() == 0:
            return self.item().__format__(spec)
        return repr(self).__format__(spec)

    def data_ptr(self):
        if self.numel() == 0:
            return 0  # c10 TensorImpl::data_impl: an empty tensor's data pointer is null, whatever its storage
        a = self._alloc
        blk = a.block
        seg = blk.segment.id if blk is not None else 0
        base = blk.segment.base if blk is not None else None
        if base is not None:  # an expandable segment's own range of addresses
            return base + self._inner.storage_offset() * self._inner.element_size()
        return (0x7F00_0000_0000 + (self._dev.index << 40) + (seg << 28)
                + self._inner.storage_offset() * self._inner.element_size())

    def untyped_storage(self):
        return _storage_of(self)

    def storage(self):
        """The deprecated TypedStorage view of the bytes (simdist/faces/storage.py SimTypedStorage)."""
        torch.storage._warn_typed_storage_removal()
        return _storage_of(self).typed(self.dtype)

    def _typed_storage(self):
        return _storage_of(self).typed(self.dtype)

    def set_(self, source=None, storage_offset=None, size=None, stride=None):
        """Tensor.set_: its binding takes only torch's own Storage classes, and a simulated tensor's C++ storage
        holds no bytes, so a storage source (or a tensor source with an offset, which torch reads as its
        storage) becomes a tensor viewing those bytes with the layout asked for (SimStorage._as_source), and
        x.set_(that tensor) runs (rules/metadata.py _set)."""
        if type(source) is SimTensor and storage_offset is not None:
            source = source.untyped_storage()
        conv = getattr(source, "_as_source", None)
        if conv is not None:
            return torch.Tensor.set_(self, conv(self.dtype, storage_offset, size, stride))
        if source is None:
            return _aten.set_.default(self)
        if storage_offset is None:
            return torch.Tensor.set_(self, source)
        return torch.Tensor.set_(self, source, storage_offset, size, *(() if stride is None else (stride,)))

    # `t.data = other` (torch's set_data) swaps t's metadata for other's and makes t view other's bytes, keeping
    # the Python object: Megatron's distributed optimizer points each parameter at its slice of a flat buffer
    # so. The wrapper's metadata is swapped by torch; the bytes it views are simdist's own to swap.
    @property
    def data(self):
        return torch.Tensor.data.__get__(self)

    @data.setter
    def data(self, new):
        torch.Tensor.data.__set__(self, new)
        if type(new) is SimTensor:
            self._inner = new._inner
            self._dev = new._dev
            self._alloc = new._alloc
            self._spec = new._spec
            self._span = None
            new._alloc.views.append(_ref(self))  # a later storage resize moves it too

    def record_stream(self, stream):
        # Tensor.record_stream's binding converts its argument to a c10::Stream, which a simulated stream is not
        self._alloc.record_stream(stream)

    def is_pinned(self):
        return False

    def __reduce_ex__(self, proto):
        # torch.save / pickle: as torch.Tensor._reduce_ex_internal, the tensor's whole storage comes to the host (a
        # synchronizing copy, as torch.save's storage.cpu() of a CUDA storage), once per save for every tensor
        # viewing it, and the tensor is its view of those bytes (offset, sizes, strides) with its Python attributes
        # (torch's _rebuild_from_type_v2 state); it is rebuilt on its device when loaded (views of one storage on
        # one device buffer), unless torch.load's map_location says otherwise (notes e9)
        if current_rank() is None:  # after its run (an exception carrying a tensor to the caller): no device work
            return (_rebuild_on_device, (self.detach().cpu(), str(self.device), self.requires_grad))  # can run
        host = _host_copy(self)
        cpu = torch.empty(0, dtype=self.dtype).set_(host, self.storage_offset(), self.size(), self.stride())
        attrs = {k: v for k, v in self.__dict__.items() if k != "_is_param"}
        args = (cpu, str(self.device), self.requires_grad)
        if getattr(self, "_is_param", False):  # nn.Parameter.__reduce_ex__: loaded as a Parameter (notes e10)
            args += (attrs, True)
        elif attrs:
            args += (attrs,)
        return (_rebuild_on_device, args)

    def __deepcopy__(self, memo):
        if getattr(self, "_is_param", False):
            # nn.Parameter.__deepcopy__ (torch/nn/parameter.py): a new Parameter of a clone of the data with its
            # requires_grad, and neither its grad nor its Python attributes (simdist kept the grad: a model
            # deep-copied after a backward had gradients a GPU's copy has not, notes e8)
            if id(self) in memo:
                return memo[id(self)]
            with torch.no_grad():
                out = self.detach().clone(memory_format=torch.preserve_format)
            out.requires_grad_(self.requires_grad)
            out._is_param = True
            memo[id(self)] = out
            return out
        if not self.is_leaf:  # as torch.Tensor.__deepcopy__
            raise RuntimeError("Only Tensors created explicitly by the user (graph leaves) support the deepcopy "
                               "protocol at the moment.  If you were attempting to deepcopy a module, this may "
                               "be because of a torch.nn.utils.weight_norm usage, see "
                               "https://github.com/pytorch/pytorch/pull/103001")
        if id(self) in memo:
            return memo[id(self)]
        # torch/_tensor.py Tensor.__deepcopy__: the storage is deep-copied once per deepcopy (UntypedStorage.
        # __deepcopy__: clone(), memo by the storage), and the copy views it with the tensor's offset, sizes and
        # strides, so views deep-copied together stay views of one new storage; then grad and `__dict__`
        with torch.no_grad():
            key = ("simdist storage", id(self._alloc))  # (deepcopy's memo keeps self, hence the allocation, alive)
            new_storage = memo.get(key)
            if new_storage is None:
                src = _storage_of(self)
                new_storage = type(src)(src.nbytes(), device=self.device)  # UntypedStorage.clone: empty + copy_
                new_storage.copy_(src)
                memo[key] = new_storage
            out = torch.empty(0, dtype=self.dtype, device=self.device)
            out.set_(new_storage, self.storage_offset(), self.size(), self.stride())
            if self.is_conj():
                out = out.conj_physical()
            if self.is_neg():
                out = out.neg()
        if self.requires_grad:
            out.requires_grad_(True)
        if self.grad is not None:
            out.grad = self.grad.__deepcopy__(memo)
        out.__dict__ = copy.deepcopy(dict(self.__dict__), memo)
        memo[id(self)] = out
        return out


def view_bytes(alloc, size, stride, dtype, storage_offset_elems=0):
    """A CPU tensor viewing an allocation's bytes as `dtype` (one typed view of each segment, then as_strided)."""
    block = alloc.block
    seg = block.segment
    typed = seg.typed.get(dtype)
    if typed is None:
        typed = seg.typed[dtype] = seg.data.view(dtype)
    return typed.as_strided(size, stride, block.offset // dtype.itemsize + storage_offset_elems)


class HostProxy(torch.Tensor):
    """A CPU-device stand-in for a SimTensor, only so Python bindings skip the CUDA guard.

    Ops on it reach the dispatch mode, which maps it back to its SimTensor.
    """

    @staticmethod
    def __new__(cls, sim):
        r = torch.Tensor._make_wrapper_subclass(
            cls, sim.shape, strides=sim.stride(), storage_offset=sim.storage_offset(), dtype=sim.dtype,
            device="cpu", requires_grad=False)
        r._sim = sim
        return r

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        return _router(func, types, args, kwargs or {})


def _proxy_index(idx):
    if isinstance(idx, SimTensor):
        return HostProxy(idx)
    if isinstance(idx, tuple):
        return tuple(HostProxy(i) if isinstance(i, SimTensor) else i for i in idx)
    if isinstance(idx, list):
        return [HostProxy(i) if isinstance(i, SimTensor) else i for i in idx]
    return idx


def _proxied(method, self, idx, *value):
    p = HostProxy(self)
    if value:
        v = value[0]
        return method(p, _proxy_index(idx), HostProxy(v) if isinstance(v, SimTensor) else v)
    out = method(p, _proxy_index(idx))
    return out


def tensor_to(t, *args, **kwargs):
    """Tensor.to for simulated tensors and for CPU tensors moving to a simulated device."""
    device, dtype, non_blocking, _copy, memory_format = _parse_to(*args, **kwargs)
    copy = kwargs.get("copy", False)
    cur_dev = t.device
    tgt_dev = device if device is not None else cur_dev
    if tgt_dev.type == "cuda" and tgt_dev.index is None:
        me = current_rank()
        tgt_dev = torch.device("cuda", me.current_device if me is not None else 0)
    tgt_dtype = dtype if dtype is not None else t.dtype
    same = tgt_dev == cur_dev and tgt_dtype == t.dtype
    if same and not copy:
        if memory_format in (None, torch.preserve_format) or _to_aliases(t, memory_format):
            return t
    kw = {"dtype": tgt_dtype, "device": tgt_dev, "non_blocking": non_blocking}
    if memory_format is not None and memory_format != torch.preserve_format:
        kw["memory_format"] = memory_format
    return _aten._to_copy.default(t, **kw)


def _to_aliases(t, memory_format):
    """Whether Tensor.to(memory_format=...) returns t itself: torch's to_will_alias asks whether the format is
    t's suggest_memory_format() (not whether t is contiguous in it: a tensor can be both row-major and
    channels_last contiguous), answered here by torch's own `to` on a meta tensor of t's layout."""
    m = torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=t.dtype, device="meta")
    return m.to(memory_format=memory_format) is m


def _parse_to(*args, **kwargs):
    kwargs = {k: v for k, v in kwargs.items() if k != "copy"}
    r = torch._C._nn._parse_to(*args, **kwargs)
    device, dtype, non_blocking, memory_format = r[0], r[1], r[2], r[3]
    return device, dtype, non_blocking, False, memory_format


_load_map_location = __import__("threading").local()


_pickling = __import__("threading").local()  # the torch.save in progress: allocation id -> (allocation, host copy)


def _host_copy(t):
    """The host copy of t's whole storage for the torch.save in progress (one per allocation, so that views of one
    storage are saved as views of one storage, as torch saves them), or a new one outside torch.save."""
    copies = getattr(_pickling, "copies", None)
    alloc = t._alloc
    entry = copies.get(id(alloc)) if copies is not None else None
    if entry is None:
        with torch.no_grad():
            host = torch.UntypedStorage(alloc.nbytes)
            host.copy_(_storage_of(t))  # a synchronizing device-to-host copy of the storage's bytes
        entry = (alloc, host)  # (the allocation kept: its id stays its own for the save)
        if copies is not None:
            copies[id(alloc)] = entry
    return entry[1]


def _rebuild_on_device(cpu, device, requires_grad=False, attrs=None, param=False):
    """Unpickle a simulated CUDA tensor: on its device inside a run (honouring torch.load's map_location, which
    simdist.patches records), on the CPU outside one (a CPU build has no CUDA device to put it on). Inside a run the
    views of one saved storage share one device buffer for the torch.load in progress (`_load_map_location.devices`,
    set by simdist.patches' torch.load), as torch rebuilds every tensor on its storage. A saved parameter comes back
    as an nn.Parameter with its attributes (torch/_utils.py _rebuild_parameter_with_state)."""
    loc = getattr(_load_map_location, "value", None)
    if callable(loc):
        out = loc(cpu, device) if not isinstance(loc, (str, torch.device)) else cpu
    else:
        if isinstance(loc, dict):
            loc = loc.get(device, device)
        target = torch.device(loc) if loc is not None else torch.device(device)
        if target.type != "cuda" or current_rank() is None:
            out = cpu if target.type == "cpu" or current_rank() is None else cpu.to(target)
        elif cpu.device.type != "cpu":  # torch.load put the saved storage on a device already (patches.py moves)
            out = cpu if cpu.device == target else cpu.to(target)
        else:
            devices = getattr(_load_map_location, "devices", None)
            host = cpu.untyped_storage()
            key = (host.data_ptr(), str(target))
            entry = devices.get(key) if devices is not None else None
            if entry is None:
                entry = (torch.empty(0, dtype=torch.uint8).set_(host).to(target), host)
                if devices is not None:
                    devices[key] = entry
            out = torch.empty(0, dtype=cpu.dtype, device=target).set_(
                entry[0].untyped_storage(), cpu.storage_offset(), cpu.size(), cpu.stride())
        if requires_grad and not param:
            out.requires_grad_(True)
    if param:  # torch._utils._rebuild_parameter(_with_state): a Parameter of the data, its requires_grad
        out = torch.nn.Parameter(out, requires_grad)
    for k, v in (attrs or {}).items():
        setattr(out, k, v)
    return out


# torch.load(weights_only=True), the default since torch 2.6, accepts only allow-listed globals. This one only
# moves a CPU tensor to a device, so it is allow-listed once at import (it changes nothing else about torch.load).
if hasattr(torch.serialization, "add_safe_globals"):
    torch.serialization.add_safe_globals([_rebuild_on_device])
