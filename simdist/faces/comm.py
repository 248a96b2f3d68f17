"""torch.cuda.comm's C++ half (torch._C._broadcast, _broadcast_out, _broadcast_coalesced, _scatter, _scatter_out,
_gather, _gather_out) for simulated devices; a CPU build has none of them (torch.cuda.comm.broadcast raised a raw
AttributeError, and nn.DataParallel with it).

Rules (torch/csrc/cuda/comm.cpp): broadcast returns the source tensor itself for its own device and a copy on each
other device (NCCL's broadcast on each device's current stream, or `out.copy_(tensor, non_blocking=True)` where NCCL
does not apply: either way each device's current stream is ordered after the data it gets); scatter splits with
`chunk` / `split_with_sizes` and moves each chunk not already on its device with `.to(device, non_blocking=True)`,
on `streams[i]` when given (chunks on the source's device stay views of it); gather allocates the result on the
destination (the current device for None, the CPU for -1) and copies each piece into its slice, non_blocking for a
device destination; broadcast_coalesced flattens the tensors in buffers of at most buffer_size bytes per dtype,
broadcasts each buffer and unflattens it into views, the inputs themselves standing for devices[0].
"""
from __future__ import annotations

import torch

from .cuda import _rank, stream as _stream_ctx


def _device_of(t):
    return t.device.index if t.device.type == "cuda" else -1


def _check_cuda(t, what):
    if t.device.type != "cuda":
        raise RuntimeError(f"Expected {what} to be a CUDA tensor, but got a tensor on {t.device}")


def _empty_on(ref, index, size=None):
    return torch.empty(ref.shape if size is None else size, dtype=ref.dtype, device=torch.device("cuda", index))


def _broadcast_out_impl(tensor, outs):
    for o in outs:
        o.copy_(tensor, non_blocking=True)
    return outs


def broadcast(tensor, devices):
    _check_cuda(tensor, "tensor")
    src = _device_of(tensor)
    others = {}
    for d in devices:
        if d < 0:
            raise RuntimeError(f"Expected non-negative device index, but got {d}")
        if d != src and d not in others:
            others[d] = _empty_on(tensor, d)
    _broadcast_out_impl(tensor, list(others.values()))
    return [tensor if d == src else others[d] for d in devices]


def broadcast_out(tensor, out):
    _check_cuda(tensor, "tensor")
    for i, o in enumerate(out):
        if o.device.type != "cuda":
            raise RuntimeError(f"Expected all output tensors to be CUDA tensors, but output tensor at index {i} "
                               f"has device '{o.device}'")
        if o.shape != tensor.shape:
            raise RuntimeError(f"Expected all output tensors to have same shape as the source tensor "
                               f"{tuple(tensor.shape)}, but output tensor at index {i} has shape {tuple(o.shape)}")
    return _broadcast_out_impl(tensor, list(out))


def _take_tensors(tensors, buffer_size):
    """torch/csrc/utils/tensor_flatten.cpp take_tensors: per dtype, in order, buffers of at most buffer_size bytes
    (a larger tensor alone)."""
    groups, open_ = [], {}
    for i, t in enumerate(tensors):
        n = t.numel() * t.element_size()
        g = open_.get(t.dtype)
        if g is None or (g[1] + n > buffer_size and g[0]):
            g = open_[t.dtype] = [[], 0]
            groups.append(g)
        g[0].append(i)
        g[1] += n
    return [g[0] for g in groups]


def broadcast_coalesced(tensors, devices, buffer_size):
    devices = list(devices)
    for t in tensors:
        if _device_of(t) != devices[0]:
            raise RuntimeError(f"All tensors must be on devices[0]: {devices[0]}")
        if t.layout != torch.strided:
            from ..engine.errors import UnsupportedOperation
            raise UnsupportedOperation("torch.cuda.comm.broadcast_coalesced of sparse tensors is not modelled by "
                                       "simdist")
    outputs = [list(tensors)] + [[None] * len(tensors) for _ in devices[1:]]
    me = _rank()
    prev = me.current_device
    try:
        torch.cuda.set_device(devices[0])
        for idx in _take_tensors(tensors, buffer_size):
            chunk = [tensors[i] for i in idx]
            flat = torch._utils._flatten_dense_tensors(chunk)
            results = broadcast(flat, devices)
            for k in range(1, len(devices)):
                torch.cuda.set_device(devices[k])
                for i, v in zip(idx, torch._utils._unflatten_dense_tensors(results[k], chunk)):
                    outputs[k][i] = v.detach()
    finally:
        torch.cuda.set_device(prev)
    return outputs


def scatter(tensor, devices, chunk_sizes=None, dim=0, streams=None):
    if not devices:
        raise RuntimeError("Expected at least one device to scatter to")
    if chunk_sizes is not None and len(chunk_sizes) != len(devices):
        raise RuntimeError(f"Expected devices and chunk_sizes to be of same length, but got len(devices) = "
                           f"{len(devices)} and len(chunk_sizes) = {len(chunk_sizes)}")
    dim = dim % tensor.dim() if tensor.dim() else 0
    chunks = list(tensor.split(list(chunk_sizes), dim) if chunk_sizes is not None
                  else tensor.chunk(len(devices), dim))
    src = _device_of(tensor)
    for i, c in enumerate(chunks):
        d = devices[i]
        if d != src:
            s = streams[i] if streams is not None and i < len(streams) else None
            if s is not None and s.device_index != d:
                raise RuntimeError(f"Expected the device associated with the stream at index {i} (was "
                                   f"{s.device_index}) to match the device supplied at that index (expected {d})")
            with _stream_ctx(s):
                chunks[i] = c.to(torch.device("cuda", d), non_blocking=True)
    return chunks


def scatter_out(tensor, out, dim=0, streams=None):
    sizes = [o.size(dim) for o in out]
    if sum(sizes) != tensor.size(dim):
        raise RuntimeError(f"Total size for output tensors along scatter dim ({sum(sizes)}) does not match the "
                           f"size of input tensor along that dim ({tensor.size(dim)})")
    chunks = tensor.split(sizes, dim)
    for i, (o, c) in enumerate(zip(out, chunks)):
        s = streams[i] if streams is not None and i < len(streams) else None
        with _stream_ctx(s):
            o.copy_(c, non_blocking=True)
    return list(out)


def _gather_sizes(tensors, dim):
    if not tensors:
        raise RuntimeError("Expected at least one tensor to gather from")
    first = tensors[0]
    dim = dim % first.dim()
    total = 0
    for i, t in enumerate(tensors):
        if t.device.type != "cuda":
            raise RuntimeError(f"Expected all input tensors to be CUDA tensors, but tensor at index {i} has device "
                               f"'{t.device}'")
        if t.dim() != first.dim() or any(t.size(k) != first.size(k) for k in range(t.dim()) if k != dim):
            raise RuntimeError(f"Input tensor at index {i} has invalid shape {list(t.shape)}, but expected "
                               f"{[first.size(k) if k != dim else t.size(k) for k in range(first.dim())]}")
        total += t.size(dim)
    return dim, total


def _gather_out_impl(tensors, out, dim):
    pieces = out.split([t.size(dim) for t in tensors], dim)
    for p, t in zip(pieces, tensors):
        p.copy_(t, non_blocking=out.device.type == "cuda")
    return out


def gather(tensors, dim=0, destination=None):
    dim, total = _gather_sizes(tensors, dim)
    size = list(tensors[0].shape)
    size[dim] = total
    if destination == -1:
        out = torch.empty(size, dtype=tensors[0].dtype)
    else:
        index = _rank().current_device if destination is None else destination
        out = _empty_on(tensors[0], index, size)
    return _gather_out_impl(tensors, out, dim)


def gather_out(tensors, out, dim=0):
    dim, total = _gather_sizes(tensors, dim)
    if out.size(dim) != total:
        raise RuntimeError(f"Expected out tensor to have size {total} along dim {dim}, but got {out.size(dim)}")
    return _gather_out_impl(tensors, out, dim)


def _nccl_is_available(tensors):
    """torch.cuda.nccl.is_available: False (simdist's comm runs the copy path of torch/csrc/cuda/comm.cpp), without
    the CPU build's "PyTorch is not compiled with NCCL support" warning, which no CUDA build prints."""
    return False


def comm_patches():
    import torch.cuda.nccl as nccl
    return [(nccl, "is_available", _nccl_is_available),
            (torch._C, "_broadcast", broadcast), (torch._C, "_broadcast_out", broadcast_out),
            (torch._C, "_broadcast_coalesced", broadcast_coalesced), (torch._C, "_scatter", scatter),
            (torch._C, "_scatter_out", scatter_out), (torch._C, "_gather", gather),
            (torch._C, "_gather_out", gather_out)]


class _InlineThread:
    """threading.Thread as torch.nn.parallel.parallel_apply uses it (start every replica's worker, then join them
    all): the worker runs at start(), in the calling rank's thread. nn.DataParallel's replicas run in host threads
    of one process on a GPU; running them one after the other is one interleaving of those threads, and keeps the
    run a function of its seed (each worker only launches work on its own device's current stream)."""

    def __init__(self, group=None, target=None, name=None, args=(), kwargs=None, *, daemon=None):
        self._target, self._args, self._kwargs = target, args, kwargs or {}

    def start(self):
        if self._target is not None:
            self._target(*self._args, **self._kwargs)

    def join(self, timeout=None):
        pass


def parallel_apply_patches():
    import threading
    from types import SimpleNamespace

    import sys

    import torch.nn.parallel.parallel_apply  # noqa: F401 - the package's attribute of that name is the function
    pa = sys.modules["torch.nn.parallel.parallel_apply"]
    return [(pa, "threading", SimpleNamespace(Thread=_InlineThread, Lock=threading.Lock))]
