"""Host memory a simulated rank shares with its devices: page-locked (pinned) CPU tensors, and the host-side
checks of asynchronous copies.

Rules (CUDA Runtime API, "API synchronization behavior"; PyTorch "CUDA semantics: pinned memory buffers"):
a non_blocking device-to-host copy into pinned memory returns at once, so a host read of the buffer before the
host waited for the copy is a `host-read` hazard; a non_blocking host-to-device copy from pinned memory reads the
buffer when it runs, so a host write to it before then is a `write-after-read` hazard.
"""
from __future__ import annotations

import weakref

import torch

from ..engine.detector import op_key
from ..engine.frames import capture_frames
from ..engine.hazards import Access, Hazard
from .op_info import VIEW, op_info

_TO_COPY = torch.ops.aten._to_copy.default


def _no_read_ops():
    """Ops on CPU tensors that read no bytes although their schema is functional: a functional collective's result
    wrapped for autograd (torch/distributed/_functional_collectives.py _maybe_wrap_tensor; the wrapper shares the
    bytes, and what reads it later is checked) and the wait itself."""
    try:
        import torch.distributed._functional_collectives  # noqa: F401  (registers the _c10d_functional ops)
        ns = torch.ops._c10d_functional
        return {ns._wrap_tensor_autograd.default, ns.wait_tensor.default}
    except (ImportError, AttributeError, RuntimeError):  # (a torch without them)
        return set()


_READS_NO_BYTES = _no_read_ops()


class HostMemory:
    """CPU tensors written by asynchronous device-to-host copies, until the host is known to have waited.

    A host op (any CPU op in a rank thread) that reads such a tensor before the copy is ordered before the host
    (a synchronize, an event wait, a query that returned True) is a `host-read` hazard; it is `observed` when the
    copy had not run yet, i.e. the host saw the poison the tensor was created with.
    """

    def __init__(self, detector):
        self.detector = detector
        self.tensors = {}  # data_ptr -> (op, tensor)
        self.sources = {}  # (op's stream id, seq) -> (op, tensor): pinned sources of async H2D copies not yet waited
        self.pinned = {}  # storage data_ptr -> weakref of a page-locked CPU tensor made in this run
        self.registered = {}  # start address -> bytes: host ranges page-locked by cudart().cudaHostRegister

    def pending(self, op, t):
        if t.numel():
            self.tensors[t.data_ptr()] = (op, t)

    # --- page-locked host memory ----------------------------------------
    def pin(self, t):
        # keyed by the storage, alive while it is: Storage.pin_memory() (torch/storage.py) pins a temporary tensor
        # over the storage and returns only the storage, which then read as not pinned (torch keeps one Python
        # object per storage while any tensor or reference holds it)
        st = t.untyped_storage()
        self.pinned[st.data_ptr()] = weakref.ref(st)
        return t

    def is_pinned(self, t):
        if t.device.type != "cpu":
            return False
        ptr = t.untyped_storage().data_ptr()
        r = self.pinned.get(ptr)
        if r is not None and r() is not None:
            return True
        # torch's is_pinned asks CUDA about the storage's pointer (cudaPointerGetAttributes): memory page-locked
        # by cudaHostRegister is pinned host memory anywhere in the registered range
        return any(start <= ptr < start + n for start, n in self.registered.items()) if ptr else False

    # --- cudaHostRegister / cudaHostUnregister (torch.cuda.cudart()) ------
    def host_register(self, ptr, nbytes):
        """cudaErrorHostMemoryAlreadyRegistered (712) for memory overlapping a registered range (CUDA Runtime API,
        cudaHostRegister), else page-locks [ptr, ptr + nbytes): cudaSuccess (0)."""
        if any(ptr < start + n and start < ptr + nbytes for start, n in self.registered.items()):
            return 712
        self.registered[ptr] = nbytes
        return 0

    def host_unregister(self, ptr):
        """cudaErrorHostMemoryNotRegistered (713) unless `ptr` starts a registered range."""
        return 0 if self.registered.pop(ptr, None) is not None else 713

    def pending_source(self, op, t):
        """An async H2D copy from pinned memory reads `t` when it runs: a host write before then races it. One entry
        per copy (two copies from slices of one buffer are both pending)."""
        if t.numel():
            self.sources[op.stream.id, op.seq] = (op, t)

    def check_writes(self, me, func, args, kwargs):
        """A host op writing CPU tensors: a pending async H2D copy from bytes it overlaps reads them later (the
        bytes, not the storage: a write to another slice of the buffer races nothing)."""
        info = op_info(func)
        for pos, name in zip(info.mutable_pos, info.mutable_names):
            a = args[pos] if pos < len(args) else kwargs.get(name)
            if not isinstance(a, torch.Tensor) or a.device.type != "cpu" or not a.numel():
                continue
            lo, hi = _extent(a)
            self.check_array_write(me, lo, hi, func)

    def check_array_write(self, me, lo, hi, what):
        """A host write through numpy into bytes [lo, hi) (HostWatchedArray: item assignment, a ufunc's out=,
        np.copyto, fill): an async H2D copy from pinned bytes it overlaps that the host has not waited for reads
        them later, so it may see the new bytes (write-after-read, as check_writes for a torch op)."""
        for key, (op, t) in list(self.sources.items()):
            tlo, thi = _extent(t)
            if not (lo < thi and tlo < hi):
                continue
            if me.host.vc.get(op.stream.id, 0) >= op.seq:
                del self.sources[key]  # the host waited for the copy
                continue
            self._report_write(me, op, t, what)

    def _report_write(self, me, op, t, func):
        # the copy has not read the pinned buffer yet when not done: it will see the host's new bytes
        self._report(me, op, t, func, "write-after-read", host_writes=True)

    def check(self, me, func, args, kwargs):
        if func is _TO_COPY and kwargs.get("device") is not None and torch.device(kwargs["device"]).type == "cuda":
            return  # a host-to-device copy: the DMA reads the buffer on its stream (check_device_read), not the host
        if not isinstance(func, str) and (op_info(func).kind == VIEW or func in _READS_NO_BYTES):
            return  # a view reads no bytes (what reads it later is checked: it overlaps the buffer's bytes)
        hits = []
        for a in _flat_tensors(args, kwargs):
            if a.device.type != "cpu" or not a.numel():
                continue
            e = self.tensors.get(a.data_ptr())
            if e is not None and (e[1] is a or a._base is e[1]):
                hits.append(e)
                continue
            lo, hi = _extent(a)
            for e in self.tensors.values():
                elo, ehi = _extent(e[1])
                if lo < ehi and elo < hi and e not in hits:
                    hits.append(e)  # a view of the buffer at another offset, or a buffer a view was copied into
        for op, t in hits:
            self.tensors.pop(t.data_ptr(), None)
            if me.host.vc.get(op.stream.id, 0) >= op.seq:
                continue  # the host waited for the copy
            self._report(me, op, t, func)

    def unwaited(self, me, t):
        """Whether a device-to-host copy into CPU tensor `t`'s bytes is still unordered before the host (what
        check would report for a read of `t` now), without reporting it."""
        if not self.tensors or t.device.type != "cpu" or not t.numel():
            return False
        lo, hi = _extent(t)
        for op, e in self.tensors.values():
            elo, ehi = _extent(e)
            if lo < ehi and elo < hi and me.host.vc.get(op.stream.id, 0) < op.seq:
                return True
        return False

    def check_storage(self, me, storage, what):
        """Code that reads a CPU storage's bytes without an aten op (torch.save, pickling a tensor) reads them
        now: a pending device-to-host copy into them is a host-read race, as any host read is."""
        if not self.tensors or storage.device.type != "cpu" or not storage.nbytes():
            return
        lo, hi = storage.data_ptr(), storage.data_ptr() + storage.nbytes()
        for key, (op, t) in list(self.tensors.items()):
            tp = t.untyped_storage().data_ptr()
            if not lo <= tp < hi:
                continue
            del self.tensors[key]
            if me.host.vc.get(op.stream.id, 0) >= op.seq:
                continue  # the host waited for the copy
            self._report(me, op, t, what)

    def check_device_read(self, me, stream, src, h2d):
        """A host-to-device copy `h2d` on `stream` reads pinned `src` when it runs: ordered after a pending
        device-to-host copy into the same bytes only when `stream` knows that copy (the same stream, an event
        wait, or a host sync before the launch); otherwise the DMA may read what the earlier copy has not
        written yet (cudaMemcpyAsync is ordered in its stream only). Returns [(hazard, that copy)]: the hazard is
        observed when that copy had not run when the DMA read (the caller checks as the DMA runs)."""
        if not self.tensors or not src.numel():
            return []
        ptr = src.untyped_storage().data_ptr()
        racing = []
        for op, t in list(self.tensors.values()):
            if t.untyped_storage().data_ptr() != ptr or op.stream is stream:
                continue
            if h2d.vc.get(op.stream.id, 0) >= op.seq:
                continue
            racing.append((self._report(me, op, src, h2d.name, kind="read-after-write", second_stream=stream.name,
                                        second_frames=h2d.frames, second_seq=h2d.seq), op))
        return racing

    def _report(self, me, op, t, func, kind="host-read", host_writes=False, second_stream=None,
                second_frames=None, second_seq=None):
        """A hazard between device op `op` and a host access to CPU tensor `t` (observed if op had not run)."""
        dtype = str(t.dtype).replace("torch.", "")
        first = Access(rank=me.rank, stream=op.stream.name, op=op.name, is_write=not host_writes,
                       shape=tuple(t.shape), dtype=dtype, frames=op.frames, seq=op.seq)
        second = Access(rank=me.rank, stream=second_stream or f"rank{me.rank}/host",
                        op=str(func).replace("aten.", ""), is_write=host_writes, shape=tuple(t.shape), dtype=dtype,
                        frames=second_frames if second_frames is not None else capture_frames(),
                        seq=second_seq or 0)
        key = (kind, first.site, second.site)
        h = self.detector.hazards.get(key)
        if h is None:
            dev = op.stream.dev
            h = Hazard(kind, first, second, f"rank {dev.rank} cuda:{dev.index}", first_op_key=op_key(op),
                       second_op_key=())
            self.detector.hazards[key] = h
            self.detector.order.append(h)
        else:
            h.count += 1
        if not op.done and second_stream is None:
            h.observed = True
        return h


def _extent(t):
    """[first byte, past the last byte) that CPU tensor `t` can touch."""
    lo = t.data_ptr()
    span = sum((n - 1) * st for n, st in zip(t.shape, t.stride()) if n > 0 and st > 0)
    return lo, lo + (span + 1) * t.element_size()


def _flat_tensors(args, kwargs):
    for a in list(args) + list(kwargs.values()):
        if isinstance(a, torch.Tensor):
            yield a
        elif isinstance(a, (list, tuple)):
            for x in a:
                if isinstance(x, torch.Tensor):
                    yield x


def location_tag_checked(orig):
    """torch.serialization.location_tag, which torch.save (and so pickling a tensor) calls once for every storage
    it writes, just before writing its bytes: the bytes a pending non_blocking device-to-host copy has not written
    yet are a host read (HostMemory.check_storage)."""
    from ..engine.context import current_rank

    def location_tag(storage):
        me = current_rank()
        hr = getattr(me, "host_memory", None) if me is not None else None
        if hr is not None and hr.tensors:
            st = storage._untyped_storage if isinstance(storage, torch.storage.TypedStorage) else storage
            if isinstance(st, torch.UntypedStorage):
                hr.check_storage(me, st, "torch.save")
        return orig(storage)
    return location_tag



def numpy_checked(orig):
    """Tensor.numpy: the array shares the tensor's bytes and reads none of them (torch/csrc/utils/tensor_numpy.cpp
    tensor_to_numpy wraps the storage). When an asynchronous device-to-host copy into those bytes is still
    unordered before the host, or the tensor is pinned (page-locked: the only host memory a non_blocking copy
    reads or writes after the host went on), the array is a HostWatchedArray: its reads through numpy (element
    access, iteration, ufuncs and reductions, array functions, conversions, printing) are checked as host reads,
    and its writes (item assignment, a ufunc's out=, np.copyto, fill, put) against pending host-to-device copies
    from its bytes, whenever they happen. So a program that waits for the copy before it reads the array
    (Megatron's alltoall token dispatcher: `.to("cpu", non_blocking=True).numpy()` on a side stream,
    `d2h_event.synchronize()` before the splits are used) is not reported, one that reads first is, and so is one
    that rewrites a persistent pinned staging buffer through the numpy view it made once (vLLM's CpuGpuBuffer.np)
    before the previous H2D copy from it ran (notes x23). numpy code that reads the buffer in C without those
    hooks (ndarray.argmax / sort, the buffer protocol) is not seen."""
    from ..engine.context import current_rank

    def numpy(self, *args, **kwargs):
        arr = orig(self, *args, **kwargs)
        me = current_rank()
        if me is not None and self.device.type == "cpu" and (me.host_memory.unwaited(me, self)
                                                             or me.host_memory.is_pinned(self)):
            arr = arr.view(HostWatchedArray)
            arr._sim_tensor = self
        return arr
    numpy.__name__ = numpy.__qualname__ = "numpy"
    return numpy


try:
    import numpy as _np
except ImportError:  # torch without numpy: Tensor.numpy raises on its own
    _np = None


def _sim_read(arrays, what):
    from ..engine.context import current_rank
    me = current_rank()
    if me is None:
        return
    for a in arrays:
        t = getattr(a, "_sim_tensor", None) if isinstance(a, HostWatchedArray) else None
        if t is not None and me.host_memory.tensors:
            me.host_memory.check(me, what, (t,), {})


def _sim_write(arrays, what):
    from ..engine.context import current_rank
    me = current_rank()
    if me is None or not me.host_memory.sources:
        return
    for a in arrays:
        if isinstance(a, HostWatchedArray) and a.size:
            me.host_memory.check_array_write(me, *_array_extent(a), what)


def _array_extent(a):
    """[first byte, past the last byte) that numpy array `a` can touch (numpy strides may be negative)."""
    lo = hi = a.__array_interface__["data"][0]
    for n, st in zip(a.shape, a.strides):
        if n > 1:
            if st < 0:
                lo += (n - 1) * st
            else:
                hi += (n - 1) * st
    return lo, hi + a.itemsize


def _plain(x):
    if isinstance(x, HostWatchedArray):
        return x.view(_np.ndarray)
    if isinstance(x, (list, tuple)):
        return type(x)(_plain(v) for v in x)
    return x


def _flat_arrays(args):
    for a in args:
        if isinstance(a, HostWatchedArray):
            yield a
        elif isinstance(a, (list, tuple)):
            yield from _flat_arrays(a)


if _np is not None:
    class HostWatchedArray(_np.ndarray):
        """A numpy array over CPU bytes that an asynchronous device-to-host copy may not have written yet: each
        read through numpy's hooks checks the copy against the host (HostMemory.check: a host-read hazard when
        the host has not waited for it). Views keep watching; results of computations are plain arrays."""
        _sim_tensor = None

        def __array_finalize__(self, obj):
            self._sim_tensor = getattr(obj, "_sim_tensor", None)

        def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
            _sim_read(list(_flat_arrays(inputs)) + list(_flat_arrays(kwargs.get("out", ()))), f"numpy.{ufunc.__name__}")
            _sim_write(list(_flat_arrays(kwargs.get("out", ()))), f"numpy.{ufunc.__name__}(out=)")
            if "out" in kwargs:
                kwargs["out"] = _plain(kwargs["out"])
            return getattr(ufunc, method)(*_plain(inputs), **kwargs)

        def __array_function__(self, func, types, args, kwargs):
            _sim_read(list(_flat_arrays(args)) + list(_flat_arrays(tuple(kwargs.values()))),
                      f"numpy.{func.__name__}")
            if func is _np.copyto and args:
                _sim_write((args[0],), "numpy.copyto")
            return func(*_plain(args), **{k: _plain(v) for k, v in kwargs.items()})

        def __getitem__(self, key):
            res = _np.ndarray.__getitem__(self.view(_np.ndarray), key)
            if isinstance(res, _np.ndarray) and _np.may_share_memory(res, self.view(_np.ndarray)):
                res = res.view(HostWatchedArray)  # a basic-indexing view reads nothing
                res._sim_tensor = self._sim_tensor
                return res
            _sim_read((self,), "numpy indexing")
            return res

        def __setitem__(self, key, value):
            plain = self.view(_np.ndarray)
            target = self
            try:
                region = _np.ndarray.__getitem__(plain, key)
                if isinstance(region, _np.ndarray) and _np.may_share_memory(region, plain):
                    target = region.view(HostWatchedArray)  # basic indexing: only the bytes it names are written
            except Exception:  # noqa: BLE001 - the assignment below raises numpy's own error
                pass
            _sim_write((target,), "numpy item assignment")
            _np.ndarray.__setitem__(plain, key, _plain(value))

        def fill(self, value):
            _sim_write((self,), "numpy fill")
            _np.ndarray.fill(self.view(_np.ndarray), value)

        def put(self, *args, **kwargs):
            _sim_write((self,), "numpy put")
            _np.ndarray.put(self.view(_np.ndarray), *args, **kwargs)

        def _reading(name):
            base = getattr(_np.ndarray, name)

            def method(self, *args, **kwargs):
                _sim_read((self,), f"numpy {name}")
                return base(self.view(_np.ndarray), *args, **kwargs)
            method.__name__ = name
            return method

        for _name in ("__iter__", "tolist", "item", "tobytes", "copy", "astype", "__int__", "__float__",
                      "__index__", "__bool__", "__repr__", "__str__", "__format__", "__reduce__", "__reduce_ex__",
                      "__array__", "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__contains__",
                      "__copy__", "__deepcopy__", "dump", "dumps", "tofile"):
            locals()[_name] = _reading(_name)
        del _name, _reading
else:  # pragma: no cover
    class HostWatchedArray:  # noqa: D101 (never made without numpy)
        pass
