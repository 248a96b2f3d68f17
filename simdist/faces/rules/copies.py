"""Op rules for copies between the host and simulated devices, and between devices.

Rules (CUDA Runtime API, "API synchronization behavior"; PyTorch "CUDA semantics: pinned memory buffers";
ATen Copy.cu `copy_device_to_device`):
- a device-to-host copy blocks the host until it completes on the current stream, unless it is
  non_blocking into pinned memory (then the host must synchronize before reading the buffer);
- a host-to-device copy with non_blocking=False blocks the host until it completes on the current stream
  (ATen Copy.cu: cudaMemcpyAsync then cudaStreamSynchronize, `memcpy_and_sync`), so the host is ordered after
  everything queued there before it; with non_blocking=True from pageable memory it is staged at the call (the
  host buffer may change at once after, no sync); from pinned memory the DMA reads the host buffer when it runs,
  in its stream's order (so after a non_blocking device-to-host copy into that buffer queued before it on the same
  stream; unordered with one on another stream), and with non_blocking=False the host then waits;
- a copy between two devices runs on the source's current stream after it waits for the destination's, and the
  destination's current stream then waits for the copy.
"""
from __future__ import annotations

import torch

from ...engine.errors import SimulationError
from ...engine.launch import launch
from ..dispatch import (_factory_device, _host_read, _nbytes, _overlaps_itself, _sim_of, _snapshot_kernel, _to_meta, allocate, dense_only)
from ..op_info import op_info
from .. import sync_debug
from ..op_rules import register
from ..probe import check_inplace
from ..tensor import HostProxy, SimTensor

aten = torch.ops.aten


@register(aten._to_copy.default)
def _to_copy(me, func, args, kwargs):
    src = args[0]
    tdev = kwargs.get("device")
    tdev = torch.device(tdev) if tdev is not None else None
    dtype = kwargs.get("dtype") or src.dtype
    src_sim = type(src) in (SimTensor, HostProxy)
    if kwargs.get("layout") not in (None, torch.strided):
        dense_only(func, kwargs["layout"])
    if not src_sim and (src.layout is not torch.strided or src.is_nested):
        dense_only(func, src.layout, src.is_nested)  # a sparse or nested host tensor copied to a simulated device
    if src_sim:
        src = _sim_of(src)
        if src._dev.rank != me.rank:
            raise SimulationError(f"rank {me.rank} used a tensor that lives on rank {src._dev.rank}")
    if src_sim and (tdev is None or tdev.type == "cuda"):
        dst_dev = src._dev if tdev is None or tdev.index is None or tdev.index == src._dev.index \
            else me.device(tdev.index)
        ck = {k: v for k, v in kwargs.items() if k not in ("device", "non_blocking", "pin_memory")}
        ck["dtype"] = dtype
        meta = aten._to_copy.default(_to_meta(src), **ck)
        stream = me.current_stream(dst_dev.index)
        out = allocate(dst_dev, stream, tuple(meta.shape), tuple(meta.stride()), meta.dtype)
        si, oi = src._inner, out._inner
        _device_copy(me, src, out, lambda: oi.copy_(si), "_to_copy")
        return out
    if src_sim and kwargs.get("non_blocking"):
        # PyTorch pins the output of a non-blocking device-to-host copy, so the copy is truly asynchronous:
        # the host gets the tensor at once and must synchronize before reading it. Its layout is _to_copy's
        # (preserve_format keeps a dense tensor's strides: a channels_last tensor stays channels_last)
        ck = {k: v for k, v in kwargs.items() if k in ("dtype", "memory_format")}
        ck["dtype"] = dtype
        meta = aten._to_copy.default(_to_meta(src), **ck)
        host = torch.empty_strided(tuple(meta.shape), tuple(meta.stride()), dtype=dtype)
        if host.untyped_storage().nbytes():
            torch.empty(0, dtype=torch.uint8).set_(host.untyped_storage()).fill_(0xFF)  # poison, as fresh memory
        host = me.host_memory.pin(host)
        if _d2h_writes_pinned_destination(src, host):
            return _d2h_async(me, src, host)
        host.copy_(_d2h_blocking(me, src, dtype, "copy_d2h"))  # (a cast into a non-contiguous pinned tensor)
        return host
    if src_sim:  # device -> host: the host waits for the copy on the current stream
        sync_debug.synchronizing(me)  # memcpy_and_sync
        res = _d2h_blocking(me, src, dtype, "copy_d2h")
        mf = kwargs.get("memory_format")
        if mf is not None and mf != torch.preserve_format:
            res = res.contiguous(memory_format=mf)
        return res
    dev = _factory_device(me, tdev)
    stream = me.current_stream(dev.index)
    hr = me.host_memory
    if hr.is_pinned(src):
        # host -> device from pinned memory: the DMA reads the host buffer when it runs (memcpy_and_sync: then
        # the host waits, unless non_blocking)
        meta = torch.empty_like(src, dtype=dtype, device="meta")  # the layout _to_copy gives (preserve_format)
        out = allocate(dev, stream, tuple(meta.shape), tuple(meta.stride()), dtype)
        if kwargs.get("non_blocking") and not _h2d_reads_pinned_source(src, out):
            return _h2d_staged(me, stream, out, src.clone(), True)
        if not kwargs.get("non_blocking"):
            sync_debug.synchronizing(me)  # memcpy_and_sync
        op = _h2d_async(me, stream, out, src)
        if not kwargs.get("non_blocking"):
            me.wait_op(op, "host-to-device copy")
        return out
    # host -> device from pageable memory: staged at launch (the host buffer is free on return), so snapshot now
    snap = src.to(dtype=dtype).clone()
    out = allocate(dev, stream, tuple(snap.shape), tuple(snap.stride()), snap.dtype)
    return _h2d_staged(me, stream, out, snap, kwargs.get("non_blocking"))


def _h2d_staged(me, stream, out, snap, non_blocking):
    """A host-to-device copy whose host bytes were read at the call (`snap`, the caller's copy of them: pageable
    memory, or the pageable temporary Copy.cu makes of a pinned source): the device write is queued on `stream`;
    without non_blocking the host then waits for it (memcpy_and_sync)."""
    oi = out._inner
    if not non_blocking:
        sync_debug.synchronizing(me)  # memcpy_and_sync
    op = launch(me, stream, "copy_h2d", "h2d", lambda: oi.copy_(snap), (), (out,), _nbytes((out,)))
    if not non_blocking:
        me.wait_op(op, "host-to-device copy")  # memcpy_and_sync: the host waits for the current stream
    return out


def _h2d_reads_pinned_source(src, dst):
    """Does a non_blocking copy from pinned `src` read `src`'s own bytes later, on the stream? Copy.cu
    copy_kernel_cuda: yes for one cudaMemcpyAsync (copy_requires_temporaries False: the same dtype and one
    contiguous run in both, `_memcpy_eligible`); otherwise (copy_requires_temporaries: a cast or a layout that
    is not one contiguous run) it copies `src.expand_as(dst).contiguous()`, which is `src` itself only when `src`
    is contiguous with dst's shape, else a pageable temporary made at the call (then staged: the pinned buffer
    is free on return)."""
    if _memcpy_eligible(src, dst):
        return True
    return tuple(src.shape) == tuple(dst.shape) and src.is_contiguous()


def _d2h_writes_pinned_destination(src, dst):
    """Does a non_blocking copy into pinned `dst` write `dst`'s bytes later (the host must wait before reading)?
    Copy.cu: yes for one cudaMemcpyAsync; with temporaries the DMA goes into `dst` when it is contiguous, else
    into a pageable `empty_like(dst)`, a copy the host waits for (cudaMemcpyAsync to pageable memory returns once
    done), then copied into `dst` on the host."""
    return _memcpy_eligible(src, dst) or dst.is_contiguous()


def _d2h_blocking(me, src, dtype, name):
    """A device-to-host copy the host waits for on the source's current stream: the CPU tensor it gives."""
    holder = []
    si = src._inner
    op = launch(me, me.current_stream(src._dev.index), name, "d2h", lambda: holder.append(si.to(dtype=dtype, copy=True)),
                (src,), (), _nbytes((src,)))
    me.wait_op(op, "device-to-host copy")
    return holder[0]


def _h2d_async(me, stream, dst, src):
    """A copy from pinned host memory: the DMA reads the host buffer when it runs, so a host write to `src`
    before the host has waited for it is a race (HostReads.check_writes), and so is a read of bytes a
    device-to-host copy on another stream has not been ordered before (HostMemory.check_device_read).
    Returns the op."""
    di = dst._inner
    racing = []

    def dma():
        for h, d2h in racing:
            if not d2h.done:
                h.observed = True  # the earlier copy had not written the bytes this DMA read
        di.copy_(src)
    op = launch(me, stream, "copy_h2d_async", "h2d", dma, (), (dst,), _nbytes((dst,)))
    hr = me.host_memory
    racing += hr.check_device_read(me, stream, src, op)
    hr.pending_source(op, src)
    return op


def _d2h_async(me, src, dst):
    """A non_blocking copy into pinned host memory: the host has `dst` at once and must wait before reading it
    (HostReads.check)."""
    si = src._inner
    # the DMA writes through `.data` (same bytes, its own version counter): the copy_ the program called has
    # counted in dst's version already, and a kernel writing later must not count again (on a GPU nothing does)
    dd = dst.data
    op = launch(me, me.current_stream(src._dev.index), "copy_d2h_async", "d2h", lambda: dd.copy_(si), (src,), (),
                _nbytes((src,)))
    me.host_memory.pending(op, dst)
    return dst


def _device_copy(me, src, dst, fn, name):
    """A device-to-device copy. Within one device: a kernel on its current stream. Across devices, as ATen's
    copy_device_to_device: the copy runs on the source device's current stream after it waits for the
    destination's current stream, and the destination's current stream then waits for the copy."""
    if src._dev is dst._dev:
        return launch(me, me.current_stream(dst._dev.index), name, "kernel", fn, (src,), (dst,),
                      _nbytes((src, dst)))
    host = me.host
    s_stream, d_stream = me.current_stream(src._dev.index), me.current_stream(dst._dev.index)
    s_stream.wait_marker(host, d_stream.record_marker(host))
    op = launch(me, s_stream, name, "copy", fn, (src,), (dst,), _nbytes((src, dst)))
    if me.launch_blocking and not _memcpy_eligible(src, dst):
        # not one cudaMemcpyAsync but a copy kernel on the source device (Copy.cu copy_device_to_device: a cast,
        # a conj / neg bit, or a layout that is not one contiguous run): under CUDA_LAUNCH_BLOCKING=1 its launch
        # returns when it has run (c3). A memcpy-eligible peer copy is left asynchronous: whether the runtime
        # blocks a cross-device cudaMemcpyAsync is measured by ci/gpu_g_facts.py peer_copy (notes g5)
        me.wait_op(op, "CUDA_LAUNCH_BLOCKING=1")
    d_stream.wait_marker(host, s_stream.record_marker(host))
    return op


def _memcpy_eligible(src, dst):
    """Copy.cu copy_device_to_device's `memcpy_eligible`: same dtype, conj and neg bits, and iter.is_contiguous()
    (after TensorIterator coalesces and reorders the dimensions, one contiguous run in both tensors: the same
    shape and strides, non-overlapping and dense; a single element always)."""
    if src.dtype != dst.dtype or src.is_conj() != dst.is_conj() or src.is_neg() != dst.is_neg():
        return False
    if dst.numel() <= 1:
        return True
    if tuple(src.shape) != tuple(dst.shape) or src.stride() != dst.stride():
        return False
    expected = 1  # non-overlapping and dense: the dimensions, by stride, tile the elements without gaps
    for stride, size in sorted((st, sz) for sz, st in zip(dst.shape, dst.stride()) if sz != 1):
        if stride != expected:
            return False
        expected *= size
    return True


@register(aten.copy_.default)
def _copy_(me, func, args, kwargs):
    dst, src = args[0], args[1]
    dst_sim = type(dst) in (SimTensor, HostProxy)
    src_sim = type(src) in (SimTensor, HostProxy)
    if dst_sim and src_sim:
        d, s = _sim_of(dst), _sim_of(src)
        for t in (d, s):
            if t._dev.rank != me.rank:
                raise SimulationError(f"rank {me.rank} used a tensor that lives on rank {t._dev.rank}")
        check_inplace(func, (d, s), {}, False)  # overlap of the two, as the host checks it at the call
        di, si = d._inner, s._inner
        copy = torch.Tensor.copy_
        if _overlaps_itself(d):  # a destination whose elements share memory: as a GPU's threads store it
            copy = _snapshot_kernel(copy, di, "copy_")
        _device_copy(me, s, d, lambda: copy(di, si), "copy_")
        return dst
    if dst_sim:  # host -> device into existing memory
        d = _sim_of(dst)
        check_inplace(func, (d, src), {}, False)
        di = d._inner
        hr = me.host_memory
        nb = len(args) > 2 and args[2] or kwargs.get("non_blocking")
        if isinstance(src, torch.Tensor) and hr.is_pinned(src) and nb and not _h2d_reads_pinned_source(src, d):
            _h2d_staged(me, me.current_stream(d._dev.index), d, src.clone(), True)  # (a pageable temporary)
            return dst
        if isinstance(src, torch.Tensor) and hr.is_pinned(src):
            # from pinned memory: the DMA reads the buffer when it runs (memcpy_and_sync: the host then waits,
            # unless non_blocking), in stream order after a pending device-to-host copy into it
            if not (len(args) > 2 and args[2] or kwargs.get("non_blocking")):
                sync_debug.synchronizing(me)  # memcpy_and_sync
            op = _h2d_async(me, me.current_stream(d._dev.index), d, src)
            if not (len(args) > 2 and args[2] or kwargs.get("non_blocking")):
                me.wait_op(op, "host-to-device copy")
            return dst
        snap = src.clone() if isinstance(src, torch.Tensor) else torch.tensor(src)
        if not (len(args) > 2 and args[2] or kwargs.get("non_blocking")):
            sync_debug.synchronizing(me)  # memcpy_and_sync
        op = launch(me, me.current_stream(d._dev.index), "copy_h2d", "h2d", lambda: di.copy_(snap), (), (d,),
                    _nbytes((d,)))
        if not (len(args) > 2 and args[2] or kwargs.get("non_blocking")):
            me.wait_op(op, "host-to-device copy")  # memcpy_and_sync: the host waits for the current stream
        return dst
    # device -> host
    s = _sim_of(src)
    # non_blocking only makes a device-to-host copy asynchronous into page-locked memory: into pageable
    # memory cudaMemcpyAsync returns once the copy is done (CUDA Runtime API, "API synchronization behavior")
    if ((len(args) > 2 and args[2] or kwargs.get("non_blocking")) and me.host_memory.is_pinned(dst)
            and _d2h_writes_pinned_destination(s, dst)):
        return _d2h_async(me, s, dst)
    holder = []
    si = s._inner
    if not (len(args) > 2 and args[2] or kwargs.get("non_blocking")):
        sync_debug.synchronizing(me)  # memcpy_and_sync (non_blocking into pageable memory: a plain cudaMemcpyAsync)
    op = launch(me, me.current_stream(s._dev.index), "copy_d2h", "d2h", lambda: holder.append(si.clone()), (s,),
                (), _nbytes((s,)))
    me.wait_op(op, "device-to-host copy")
    dst.copy_(holder[0])
    return dst


@register(aten.equal.default)
def _equal(me, func, args, kwargs):
    """torch.equal of two device tensors as ATen's cuda_equal (aten/src/ATen/native/cuda/Equal.cpp): different
    sizes give False, no elements True, and the same view of the same storage True, each without a kernel or a host
    sync; otherwise `at::eq(self, src).all().item()`: kernels on the current stream and a blocking copy, here one
    host-reading op on that stream."""
    a, b = args[0], args[1]
    if type(a) not in (SimTensor, HostProxy) or type(b) not in (SimTensor, HostProxy):
        raise RuntimeError(f"Cannot compare two tensors on different devices. Got: {a.device} and {b.device}")
    a, b = _sim_of(a), _sim_of(b)
    if a._dev is not b._dev:
        raise RuntimeError(f"Cannot compare two tensors on different devices. Got: {a.device} and {b.device}")
    if a.shape != b.shape:
        return False
    if a.numel() == 0:
        return True
    if (a._alloc is b._alloc and a.storage_offset() == b.storage_offset() and a.dtype == b.dtype
            and a.stride() == b.stride() and a.is_neg() == b.is_neg() and a.is_conj() == b.is_conj()):
        return True
    return _host_read(me, func, op_info(func), args, kwargs)  # (one op for the GPU's eq, all and copy)


@register(aten._local_scalar_dense.default)
def _item(me, func, args, kwargs):
    s = _sim_of(args[0])
    holder = []
    si = s._inner
    sync_debug.synchronizing(me)  # memcpy_and_sync
    op = launch(me, me.current_stream(s._dev.index), "item", "d2h", lambda: holder.append(si.item()), (s,), (),
                _nbytes((s,)))
    me.wait_op(op, ".item()")
    return holder[0]
