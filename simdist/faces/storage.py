"""Storage resize of simulated tensors (Tensor.resize_ past the allocation, untyped_storage().resize_).

Rules (c10/core/StorageImpl, ATen resize_bytes_cuda): the storage gets new memory from the caching allocator
on the current stream, the old bytes are copied there on that stream up to the smaller size, and the old
memory is freed; every tensor viewing the storage sees the new memory. Resizing to 0 bytes frees the memory;
a tensor on a storage of 0 bytes cannot be used until it is resized back (FSDP2 frees and re-allocates its
unsharded parameters this way).
"""
from __future__ import annotations

from ..engine.context import current_rank
from ..engine.errors import SimulationError
from ..engine.launch import launch
from ..engine.regions import ByteRange
from .tensor import set_storage_class, view_bytes


def resize_storage(t, nbytes):
    rs = current_rank()
    if rs is None:
        raise SimulationError("a simulated tensor's storage was resized outside a simulated rank")
    alloc = t._alloc
    if nbytes == alloc.nbytes and alloc.block is not None:
        return
    dev = t._dev
    stream = rs.current_stream(dev.index)
    mem = alloc.allocator
    old = mem.reallocate(alloc, nbytes, stream)
    keep = min(old.nbytes, nbytes) if old.block is not None and alloc.block is not None else 0
    if keep:
        src, dst = ByteRange(old, 0, keep, dev), ByteRange(alloc, 0, keep, dev)
        s, d = src._inner, dst._inner
        launch(rs, stream, "resize_copy", "kernel", lambda: d.copy_(s), [src], [dst], 2 * keep)
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


def check_usable(t):
    """A tensor whose storage was resized below what it views (FSDP2's freed parameters) cannot be used."""
    a = t._alloc
    if a.block is None or (t.storage_offset() + _extent(t)) * t.element_size() > a.nbytes:
        raise SimulationError(f"a simulated {t.dtype}{list(t.shape)} tensor was used while its storage holds "
                              f"{a.nbytes} bytes (resized by untyped_storage().resize_): torch raises too "
                              "('out of bounds for storage')")


class SimStorage:
    """Tensor.untyped_storage() of a simulated tensor: the bytes of its allocation. resize_(n) reallocates them
    as torch does (a new block of the caching allocator on the current stream, the old bytes copied up to the
    smaller size, every tensor viewing the storage moved along; resize_(0) frees them, as FSDP2 does between
    steps)."""

    def __init__(self, t):
        self._tensor = t

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
        return 0 if blk is None else (0x7F00_0000_0000 + (self._tensor._dev.index << 40) + (blk.segment.id << 28)
                                      + blk.offset)

    def resize_(self, nbytes):
        resize_storage(self._tensor, int(nbytes))
        return self

    def __eq__(self, other):
        return isinstance(other, SimStorage) and other._tensor._alloc is self._tensor._alloc

    def __hash__(self):
        return id(self._tensor._alloc)

    def __repr__(self):
        return f"<simdist storage of {self.size()} bytes on {self.device}>"


set_storage_class(SimStorage)
