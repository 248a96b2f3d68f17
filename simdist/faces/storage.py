"""Storage resize of simulated tensors (Tensor.resize_ past the allocation, untyped_storage().resize_).

Rules (c10/core/StorageImpl, ATen resize_bytes_cuda): the storage gets new memory from the caching allocator
on the current stream, the old bytes are copied there on that stream up to the smaller size, and the old
memory is freed; every tensor viewing the storage sees the new memory. Resizing to 0 bytes frees the memory;
a tensor on a storage of 0 bytes cannot be used until it is resized back (FSDP2 frees and re-allocates its
unsharded parameters this way).
"""
from __future__ import annotations

import weakref

import torch

from ..engine.context import current_rank
from ..engine.errors import SimulationError, UnsupportedOperation
from ..engine.launch import launch
from ..engine.regions import ByteRange
from .tensor import set_storage_class, view_bytes


def resize_storage(t, nbytes):
    me = current_rank()
    if me is None:
        raise SimulationError("a simulated tensor's storage was resized outside a simulated rank")
    alloc = t._alloc
    if nbytes == alloc.nbytes and alloc.block is not None:
        return
    dev = t._dev
    stream = me.current_stream(dev.index)
    mem = alloc.allocator
    old = mem.reallocate(alloc, nbytes, stream)
    keep = min(old.nbytes, nbytes) if old.block is not None and alloc.block is not None else 0
    if keep:
        src, dst = ByteRange(old, 0, keep, dev), ByteRange(alloc, 0, keep, dev)
        s, d = src._inner, dst._inner
        launch(me, stream, "resize_copy", "kernel", lambda: d.copy_(s), [src], [dst], 2 * keep)
    rebind_views(alloc)
    del old  # the old block is freed now (after the copy that reads it was queued)


def rebind_views(alloc):
    """Point every live tensor viewing `alloc` at its (new) block, keeping shape, strides and offset."""
    live = []
    for ref in alloc.views:
        v = ref()
        if v is None or not hasattr(v, "_alloc") or v._alloc is not alloc:
            continue  # dead, or no longer a view of these bytes (swap_tensors, `.data =` another tensor)
        live.append(ref)
        v._span = None
        if alloc.block is None:
            continue  # freed storage: using v raises (simdist/faces/dispatch.py _unwrap)
        need = (v.storage_offset() + _extent(v)) * v.element_size()
        if need > alloc.nbytes:
            continue  # the storage is now too small for this view: it stays unusable until it grows again
        v._inner = view_bytes(alloc, tuple(v.shape), tuple(v.stride()), v.dtype, v.storage_offset())
    alloc.views[:] = live


def _extent(v):
    if v.numel() == 0:
        return 0
    return 1 + sum((s - 1) * st for s, st in zip(v.shape, v.stride()))


def _extent_of(size, stride):
    return 0 if any(d == 0 for d in size) else 1 + sum((d - 1) * st for d, st in zip(size, stride))


def check_usable(t):
    """A tensor whose storage was resized below what it views (FSDP2's freed parameters) cannot be used."""
    a = t._alloc
    if a.block is None or (t.storage_offset() + _extent(t)) * t.element_size() > a.nbytes:
        raise SimulationError(f"a simulated {t.dtype}{list(t.shape)} tensor was used while its storage holds "
                              f"{a.nbytes} bytes (resized by untyped_storage().resize_): torch raises too "
                              "('out of bounds for storage')")


def _refuse_new_storage(args, kwargs):
    """`type(storage)(...)` of a simulated tensor's storage with arguments other than a size and a device (a
    sequence of bytes, a filename, ...): not modelled, refused by name."""
    raise UnsupportedOperation(
        "a new storage made from a simulated CUDA tensor's storage type with these arguments "
        f"({', '.join([*map(repr, args), *(f'{k}={v!r}' for k, v in kwargs.items())])}) is not modelled by simdist; "
        "type(t.untyped_storage())(nbytes, device=...) is (a new storage of that many bytes on that device)")


def _new_storage(nbytes, device=None):
    """`type(t.untyped_storage())(nbytes, device=...)` of a simulated tensor, as torch.distributed.checkpoint's
    state-dict stager does (_state_dict_stager.py _stage_untyped_storage: `type(storage)(storage.size(),
    device="cpu")`): the type is torch.UntypedStorage on a GPU, whose constructor makes `nbytes` bytes on `device`
    (CPU when none is given: torch/csrc/Storage.cpp THPStorage_pynew) from that device's allocator. A CPU device gives
    torch's own CPU storage; a CUDA device gives a simulated storage of a block from the caching allocator on the
    current stream, as torch.empty(nbytes, dtype=torch.uint8, device=device) takes it."""
    dev = torch.device("cpu" if device is None else device)
    if dev.type == "cpu":
        return torch.UntypedStorage(nbytes)
    if dev.type != "cuda":
        raise UnsupportedOperation(f"a new storage on {dev} made from a simulated CUDA tensor's storage type is not "
                                   "modelled by simdist (CPU and CUDA devices are)")
    return torch.empty(nbytes, dtype=torch.uint8, device=dev).untyped_storage()


def _byte_view(storage):
    """at::storage_copy's view of a storage: a 1-D uint8 tensor of all its bytes (aten/src/ATen/StorageUtils.cpp:
    `at::empty({0}, options.dtype(kByte)).set_(storage)`)."""
    if isinstance(storage, SimStorage):
        return storage._as_source(torch.uint8)
    if isinstance(storage, SimTypedStorage):
        return storage.untyped()._as_source(torch.uint8)
    if isinstance(storage, torch.TypedStorage):
        storage = storage.untyped()
    return torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage)


_orig_storage_copy = torch.UntypedStorage.copy_


def storage_copy(dst, src, non_blocking=None):
    """UntypedStorage.copy_(src, non_blocking=False) where either storage is a simulated CUDA tensor's: torch checks
    the sizes ("size does not match, self was N bytes but src was M bytes": torch/csrc/StorageMethods.cpp
    THPStorage_copy_) and copies as at::storage_copy does (aten/src/ATen/StorageUtils.cpp: a uint8 tensor viewing
    each storage, `dst_t.copy_(src_t, non_blocking)`), so the copy is the tensor copy a GPU runs: device-to-host into
    pinned memory asynchronous with non_blocking, synchronous otherwise. Storages of torch's own are torch's."""
    if not isinstance(dst, (SimStorage, SimTypedStorage)) and not isinstance(src, (SimStorage, SimTypedStorage)):
        return _orig_storage_copy(dst, src) if non_blocking is None else _orig_storage_copy(dst, src, non_blocking)
    if dst.nbytes() != src.nbytes():
        raise RuntimeError(f"size does not match, self was {dst.nbytes()} bytes but src was {src.nbytes()} bytes")
    _byte_view(dst).copy_(_byte_view(src), non_blocking=bool(non_blocking))
    return dst


_orig_untyped_new = torch.UntypedStorage.__new__


def _untyped_storage_new(cls, *args, **kwargs):
    """torch.UntypedStorage(nbytes, device="cuda") during a run (torch/csrc/Storage.cpp THPStorage_pynew: `nbytes`
    uninitialised bytes from that device's allocator, on the current stream): a simulated storage, as
    type(t.untyped_storage())(nbytes, device=...) gives one. Other CUDA-device forms (from a sequence of bytes) are
    refused by name; every CPU form is torch's own (the CPU build's constructor would say "Storage device not
    recognized: cuda", which names no cause)."""
    dev = kwargs.get("device")
    if cls is torch.UntypedStorage and dev is not None and torch.device(dev).type == "cuda":
        if len(args) == 1 and isinstance(args[0], int) and not isinstance(args[0], bool) and set(kwargs) == {"device"}:
            return _new_storage(args[0], dev)
        _refuse_new_storage(args, kwargs)
    return _orig_untyped_new(cls, *args, **kwargs)


def storage_patches():
    """(owner, attribute, replacement): torch's CPU storages' copy_ takes a simulated storage as its source;
    torch.UntypedStorage(nbytes, device="cuda") makes a simulated one."""
    return [(torch.UntypedStorage, "copy_", storage_copy),
            (torch.UntypedStorage, "__new__", staticmethod(_untyped_storage_new))]


class SimStorage:
    """Tensor.untyped_storage() of a simulated tensor: the bytes of its allocation. resize_(n) reallocates them
    as torch does (a new block of the caching allocator on the current stream, the old bytes copied up to the
    smaller size, every tensor viewing the storage moved along; resize_(0) frees them, as FSDP2 does between
    steps). Other UntypedStorage methods are refused by name (UnsupportedOperation)."""

    def __new__(cls, t=None, *args, **kwargs):
        """`type(storage)(nbytes, device=...)`: a new storage, as torch.UntypedStorage's constructor makes it."""
        if isinstance(t, int) and not isinstance(t, bool) and not args and set(kwargs) <= {"device"}:
            return _new_storage(t, kwargs.get("device"))
        _refuse_new_storage((t, *args) if t is not None else args, kwargs)

    @classmethod
    def _of(cls, alloc, dev):
        s = object.__new__(cls)
        s._alloc = alloc  # holds the bytes, as a storage keeps its memory alive
        s._dev = dev
        return s

    @classmethod
    def _new_shared(cls, size, *, device="cpu"):
        """torch/storage.py _StorageBase._new_shared: a CPU storage in shared memory (torch's own, made as torch
        makes it), or on another device the constructor's storage."""
        if torch.device(device).type == "cpu":
            return torch.UntypedStorage._new_shared(size, device="cpu")
        return _new_storage(size, device)

    def copy_(self, src, non_blocking=None):
        return storage_copy(self, src, non_blocking)

    def _fix_weakref(self):
        """torch.utils.weak's WeakIdRef calls it on what a weak reference gives back (the PyObject resurrection of
        torch's C++ storages); a simulated storage is a plain Python object: nothing to fix."""

    @property
    def device(self):
        return self._dev.torch_device

    def size(self):
        return self._alloc.nbytes

    nbytes = size

    def __len__(self):
        return self.size()

    def element_size(self):
        return 1

    def data_ptr(self):
        a = self._alloc
        blk = a.block
        if blk is None or not a.nbytes:
            return 0  # the caching allocator gives no memory (a null pointer) for 0 bytes
        if blk.segment.base is not None:  # an expandable segment's own range of addresses
            return blk.segment.base + blk.offset
        return 0x7F00_0000_0000 + (self._dev.index << 40) + (blk.segment.id << 28) + blk.offset

    def resize_(self, nbytes):
        resize_storage(self, int(nbytes))  # (it needs the allocation and device, which a storage has)
        return self

    @property
    def is_cuda(self):
        return True

    def share_memory_(self):
        """A no-op for a CUDA storage (torch/storage.py _StorageBase.share_memory_: "only CPU uses POSIX shared
        memory"; CUDA memory crosses processes through CUDA IPC at pickling instead)."""
        return self

    def is_shared(self):
        """True for a CUDA storage (torch/csrc/StorageMethods.cpp THPStorage_isShared: CUDA is always shared)."""
        return True

    def typed(self, dtype):
        return SimTypedStorage(self, dtype)

    def _as_source(self, dtype, offset=None, size=None, stride=None):
        """Tensor.set_(this storage[, offset, size, stride]) as x.set_(a tensor): a tensor of x's dtype viewing
        these bytes so (the whole storage, 1-D, without an offset; contiguous strides without a stride). As
        torch's set_, the storage grows when the view reaches past its end (set_storage_*_: resize_impl)."""
        from .tensor import SimTensor
        t = self
        if offset is None:
            offset, size, stride = 0, (self.nbytes() // dtype.itemsize,), (1,)
        else:
            m = torch.empty(0, dtype=dtype, device="meta")  # torch's own checks and default strides
            m.set_(torch.empty(0, dtype=dtype, device="meta").untyped_storage(), offset, size,
                   *(() if stride is None else (stride,)))
            size, stride = tuple(m.shape), tuple(m.stride())
        need = (offset + _extent_of(size, stride)) * dtype.itemsize
        if need > self.nbytes():
            resize_storage(t, need)
        alloc = t._alloc
        if alloc.block is None:  # no bytes (resized to 0): unusable until the storage grows again
            return SimTensor(torch.empty(0, dtype=dtype), t._dev, alloc, False, tuple(size), tuple(stride), offset)
        return SimTensor(view_bytes(alloc, tuple(size), tuple(stride), dtype, offset), t._dev, alloc)

    def __eq__(self, other):
        return isinstance(other, SimStorage) and other._alloc is self._alloc

    def __hash__(self):
        return id(self._alloc)

    def __repr__(self):
        return f"<simdist storage of {self.size()} bytes on {self.device}>"

    def __getattr__(self, name):
        _refuse_unmodelled(type(self).__name__, torch.UntypedStorage, name)


def _refuse_unmodelled(cls, real, name):
    """A storage API that torch's own storage class has and simdist's does not model: refused by name (anything
    else is an ordinary AttributeError, so hasattr() keeps working)."""
    if name in ("_share_cuda_", "_new_shared_cuda", "_release_ipc_counter_cuda"):
        raise UnsupportedOperation(
            f"{real.__name__}.{name}: sharing a simulated CUDA tensor with another process through a CUDA IPC handle "
            "(torch.multiprocessing.reductions.reduce_tensor / rebuild_cuda_tensor, as colocated RL refit hands "
            "weights to an inference engine) is not modelled by simdist: the simulated ranks have no second "
            "process to map the memory into")
    if not name.startswith("__") and hasattr(real, name):
        raise UnsupportedOperation(f"{real.__name__}.{name} of a simulated CUDA tensor's storage is not modelled by "
                                   f"simdist ({cls} models size, nbytes, data_ptr, resize_, device, "
                                   "element_size; Tensor.set_ takes it)")
    raise AttributeError(f"'{cls}' object has no attribute '{name}'")


class SimTypedStorage:
    """Tensor.storage() of a simulated tensor: torch's deprecated TypedStorage, a view of the untyped storage
    counting elements of the tensor's dtype (torch/storage.py TypedStorage: size() = nbytes // itemsize,
    resize_(n) resizes the bytes to n * itemsize)."""

    def __init__(self, untyped, dtype):
        self._untyped_storage = untyped
        self.dtype = dtype

    @property
    def device(self):
        return self._untyped_storage.device

    @property
    def is_cuda(self):
        return True

    def untyped(self):
        return self._untyped_storage

    def element_size(self):
        return self.dtype.itemsize

    def size(self):
        return self._untyped_storage.nbytes() // self.dtype.itemsize

    _size = size  # torch's own name for it (FSDP1: `flat_param._typed_storage()._size() > 0`)

    def __len__(self):
        return self.size()

    def nbytes(self):
        return self._untyped_storage.nbytes()

    def data_ptr(self):
        return self._untyped_storage.data_ptr()

    def resize_(self, size):
        self._untyped_storage.resize_(int(size) * self.dtype.itemsize)
        return self

    _resize_ = resize_

    def _as_source(self, dtype, offset=None, size=None, stride=None):
        return self._untyped_storage._as_source(dtype, offset, size, stride)

    def _share_memory_(self):
        """torch/storage.py TypedStorage._share_memory_: the untyped storage's share_memory_ (a no-op on CUDA)."""
        self._untyped_storage.share_memory_()
        return self

    share_memory_ = _share_memory_

    def _is_shared(self):
        return self._untyped_storage.is_shared()

    is_shared = _is_shared

    def __eq__(self, other):
        return isinstance(other, SimTypedStorage) and other._untyped_storage == self._untyped_storage \
            and other.dtype == self.dtype

    def __hash__(self):
        return hash((self._untyped_storage, self.dtype))

    def __repr__(self):
        return f"<simdist typed storage of {self.size()} {self.dtype} on {self.device}>"

    def __getattr__(self, name):
        _refuse_unmodelled(type(self).__name__, torch.TypedStorage, name)


_live_storages = weakref.WeakKeyDictionary()  # Allocation -> weakref of its SimStorage


def storage_of(t):
    """Tensor.untyped_storage() of a simulated tensor: one storage object per allocation for as long as it is
    referenced. torch preserves a storage's Python object while the storage lives (torch/csrc/Storage.cpp
    THPStorage_Wrap returns the StorageImpl's own PyObject), so every view of the same bytes gives the same object
    and its id() names the storage: torch.distributed.checkpoint's stager staged a storage once per id()
    (_state_dict_stager.py _offload_tensor: `storage_id = id(untyped_storage)`, memo), which with a new object per
    call gave a recycled id() to another storage and staged that storage's bytes in its place. The tensor that
    asked keeps the object alive (a stager's memo keeps the tensor)."""
    alloc = t._alloc
    s = getattr(t, "_storage", None)
    if s is not None and s._alloc is alloc:
        return s
    r = _live_storages.get(alloc)
    s = r() if r is not None else None
    if s is None:
        s = SimStorage._of(alloc, t._dev)
        _live_storages[alloc] = weakref.ref(s)
    t._storage = s
    return s


set_storage_class(storage_of)
