"""torch.use_deterministic_algorithms(True) with torch.utils.deterministic.fill_uninitialized_memory (the default)
on simulated CUDA: the memory deterministic mode fills.

Rule (aten/src/ATen/native/TensorFactories.cpp / cuda/EmptyTensor: empty, empty_strided,
empty_permuted; Resize.cpp resize_: `fill_resize_deterministic_`; torch.utils.deterministic.
fill_uninitialized_memory, default True): with deterministic algorithms and fill_uninitialized_memory on, a new
uninitialized tensor is filled with NaN (floating and complex types) or the largest value (integer types, True
for bool), and resize_ fills the bytes the storage grew by. simdist returned the allocator's bytes (poison or a
freed block's stale values: a silent wrong value for a program that relies on the fill). The fill is a kernel on
the current stream, as on a GPU; its value is the one torch's own CPU factory writes in this mode.
"""
from __future__ import annotations

import torch
import torch.utils.deterministic  # noqa: F401  (not imported by `import torch`)

from ..engine.launch import launch
from ..engine.regions import ByteRange


def fills():
    return torch.are_deterministic_algorithms_enabled() and torch.utils.deterministic.fill_uninitialized_memory


def fill_new(me, out, stream=None):
    """empty / empty_strided / empty_like / new_empty...: fill the new tensor's elements (fill_empty_deterministic_)."""
    if not out.numel():
        return
    value = torch.empty(1, dtype=out.dtype)  # the value torch's own factory writes in this mode
    oi = out._inner
    stream = stream or me.current_stream(out._dev.index)
    launch(me, stream, "fill_empty_deterministic_", "kernel", lambda: oi.copy_(value.expand(oi.shape)), (), (out,),
           out._alloc.nbytes, skip=3)


def fill_grown(me, t, old_nbytes):
    """resize_ that grew t's storage: fill its elements from the old storage's end (fill_resize_deterministic_)."""
    alloc = t._alloc
    item = t.element_size()
    lo, hi = (old_nbytes // item) * item, (alloc.nbytes // item) * item
    if hi <= lo:
        return
    value = torch.empty(1, dtype=t.dtype)
    dev = t._dev
    br = ByteRange(alloc, lo, hi, dev)
    inner = br._inner

    def fn():
        inner.view(t.dtype).copy_(value.expand(inner.numel() // item))

    launch(me, me.current_stream(dev.index), "fill_resize_deterministic_", "kernel", fn, (), (br,), hi - lo, skip=3)
