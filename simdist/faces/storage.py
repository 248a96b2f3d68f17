"""Storage resize of simulated tensors (Tensor.resize_ past the allocation, untyped_storage().resize_).

Rules (c10/core/StorageImpl, ATen resize_bytes_cuda): the storage gets new memory from the caching allocator
on the current stream, the old bytes are copied there on that stream up to the smaller size, and the old
memory is freed; every tensor viewing the storage sees the new memory. Resizing to 0 bytes frees the memory;
a tensor on a storage of 0 bytes cannot be used until it is resized back (FSDP2 frees and re-allocates its
unsharded parameters this way).
"""
from __future__ import annotations

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
    """`type(storage)(n, device=...)` of a simulated tensor's storage: a new storage made from its type, as
    torch.distributed.checkpoint's staging does for async_save (_state_dict_stager.py _stage_untyped_storage:
    a CPU storage, pinned, filled by `copy_(storage, non_blocking=...)`). Not modelled: refused by name."""
    raise UnsupportedOperation(
        "a new storage made from a simulated CUDA tensor's storage type (type(t.untyped_storage())(n, device=...), "
        "as torch.distributed.checkpoint.async_save's state-dict stager does to stage tensors into pinned host "
        "memory) is not modelled by simdist; dcp.save, or staging with t.to('cpu') before async_save, is")


class SimStorage:
    """Tensor.untyped_storage() of a simulated tensor: the bytes of its allocation. resize_(n) reallocates them
    as torch does (a new block of the caching allocator on the current stream, the old bytes copied up to the
    smaller size, every tensor viewing the storage moved along; resize_(0) frees them, as FSDP2 does between
    steps). Other UntypedStorage methods are refused by name (UnsupportedOperation)."""

    def __init__(self, t=None, *args, **kwargs):
        if args or kwargs or not hasattr(t, "_alloc"):
            _refuse_new_storage(args, kwargs)
        self._tensor = t

    @classmethod
    def _new_shared(cls, *args, **kwargs):
        _refuse_new_storage(args, kwargs)

    @property
    def device(self):
        return self._tensor.device

    def size(self):
        return self._tensor._alloc.nbytes

    nbytes = size

    def __len__(self):
        return self.size()

    def element_size(self):
        return 1

    def data_ptr(self):
        a = self._tensor._alloc
        blk = a.block
        if blk is None or not a.nbytes:
            return 0  # the caching allocator gives no memory (a null pointer) for 0 bytes
        return 0x7F00_0000_0000 + (self._tensor._dev.index << 40) + (blk.segment.id << 28) + blk.offset

    def resize_(self, nbytes):
        resize_storage(self._tensor, int(nbytes))
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
        t = self._tensor
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
        return isinstance(other, SimStorage) and other._tensor._alloc is self._tensor._alloc

    def __hash__(self):
        return id(self._tensor._alloc)

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


set_storage_class(SimStorage)
