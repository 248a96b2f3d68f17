"""Streams and events as torch's C++ side sees them, through the fake CUDA device guard (simdist/faces/guard.py,
csrc/fake_cuda_guard.cpp): what C++ code records and waits on a CUDA device becomes markers and waits on the
simulated streams, and a c10::Stream names a simulated stream by its id.

Who reaches this:
- autograd (torch/csrc/autograd/engine.cpp, input_buffer.cpp): every node keeps the stream current when its
  forward op ran (InputMetadata asks getStream), its backward runs with that stream made current (a StreamGuard:
  exchangeStream), a gradient produced on one stream and consumed or accumulated on another is joined by an event
  (record + block) and record_stream'ed (recordDataPtrOnStream), and at the end the caller's current streams wait
  for the leaf streams. So backward ops run on their forward ops' streams, as the CUDA notes say
  (https://pytorch.org/docs/stable/notes/cuda.html#stream-semantics-of-backward-passes), with torch's own syncs.
- a CUDA `ivalue::Future` (torch.futures.Future(devices=[cuda]); simdist's Work.get_future returns one) records an
  event on the current stream of each of its devices when it completes, makes the current streams wait for those
  events in `wait()` (Python's `fut.wait()`, and torch DDP's C++ Reducer in `finalize_backward`), and runs each
  `then()` callback on a pool stream that first waits for them (torch/include/ATen/core/ivalue_inl.h:
  markCompleted, synchronizeWithCurrentStreams, invokeCallback); `torch.Event`.
Stream ids: a simulated stream's own id (Rank.stream_by_id), pool streams included (the device's pool, as
torch.cuda.Stream() takes from it: _pool); 0 the rank's current stream.

The callbacks run inside torch's C++ code and must not raise into it: an error is made the run's fatal error and
the callback returns a neutral value.
"""
from __future__ import annotations

import contextlib
import ctypes
import itertools
import threading
import weakref

from ..engine.context import current_rank
from ..engine.errors import SimulationError


_markers = {}  # event id -> marker op (ids are unique in this process)
_ids = itertools.count(1)
_local = threading.local()  # .completing: (device index, marker) while a Work's future is being completed
# Each rank's backward-pass bookkeeping (Rank.backward_depth, .backward_made: tensors made meanwhile, .backward_keys:
# storage key -> weak reference): the tensors made while a backward pass runs, so recordDataPtrOnStream's key can be mapped back to one
# (their C++ storages hold no data: csrc/fake_cuda_guard.cpp). Per rank, so that rank threads of one process see
# what rank processes see. SimTensor's constructors append to `made` of their device's rank while it is not None.


@contextlib.contextmanager
def completing(device, marker):
    """While a Work's future is marked complete: its event on `device` is the collective's own end marker (the
    event ProcessGroupNCCL's future records on the NCCL stream), not a marker of the caller's current stream."""
    _local.completing = (device, marker)
    try:
        yield
    finally:
        _local.completing = None


@contextlib.contextmanager
def in_backward(rank, tensors):
    """While autograd runs a backward pass in `rank`: the tensors it may record_stream (`tensors`: roots and initial
    gradients; the ones made meanwhile are collected by SimTensor's constructors)."""
    if rank.backward_depth == 0:
        rank.backward_made = []
        rank.backward_keys = {}
    rank.backward_depth += 1
    rank.backward_made.extend(weakref.ref(t) for t in tensors)
    try:
        yield
    finally:
        rank.backward_depth -= 1
        if rank.backward_depth == 0:
            rank.backward_made = None
            rank.backward_keys = None


_lib = None  # the guard's library (simdist/faces/guard.py load: bind)


def bind(lib):
    global _lib
    _lib = lib


def _storage_key(tensor):
    """The name recordDataPtrOnStream gives `tensor`'s storage: its StorageImpl's DataPtr (csrc/fake_cuda_guard.cpp)."""
    return _lib.simdist_guard_storage_key(tensor._cdata) or 0


def _tensor_of(rank, key):
    keys, made = rank.backward_keys, rank.backward_made
    if keys is None:
        return None
    ref = keys.get(key)
    t = ref() if ref is not None else None
    if t is not None and _storage_key(t) == key:
        return t
    t = None
    if made:
        pending, made[:] = list(made), []
        for r in pending:
            u = r()
            if u is not None:
                keys[_storage_key(u)] = r
        ref = keys.get(key)
        t = ref() if ref is not None else None
        if t is not None and _storage_key(t) != key:
            t = None
    return t


def _stream(rank, device, sid):
    if sid == 0:
        return rank.current_stream(device)
    s = rank.stream_by_id.get(sid)
    if s is None or s.dev.index != device:
        raise SimulationError(f"torch's C++ side named CUDA stream {sid} on cuda:{device}, which rank {rank.rank} "
                              "does not have")
    return s


def _guarded(default):
    def wrap(fn):
        def call(*args):
            rank = current_rank()
            if rank is None:
                return default
            try:
                return fn(rank, *args)
            except BaseException as e:  # noqa: BLE001 - nothing may unwind into torch's C++ code
                if rank.world.fatal is None:
                    rank.world.fatal = e
                return default
        return call
    return wrap


@_guarded(0)
def _record(rank, event, device, sid):
    done = getattr(_local, "completing", None)
    if done is not None and done[0] == device and done[1] is not None:
        marker = done[1]
    else:
        marker = _stream(rank, device, sid).record_marker(rank.host)
    if event == 0:
        event = next(_ids)
    _markers[event] = marker
    return event


@_guarded(None)
def _block(rank, event, device, sid):
    marker = _markers.get(event)
    if marker is not None:
        _stream(rank, device, sid).wait_marker(rank.host, marker)


@_guarded(1)
def _query(rank, event):
    m = _markers.get(event)
    if m is None or (m.end is not None and m.end <= rank.host.clock):
        if m is not None:
            rank.host.join_op(m)
        return 1
    rank.poll_pending(m, "torch.Event.query()")
    return 0


@_guarded(None)
def _synchronize_event(rank, event):
    m = _markers.get(event)
    if m is not None:
        rank.wait_op(m, "torch.Event.synchronize()")


def _destroy(event):
    _markers.pop(event, None)


@_guarded(None)
def _exchange(rank, device, sid):
    if sid == 0:
        return  # (a stream named before the rank had this device: its current stream, unchanged)
    rank.current_streams[device] = _stream(rank, device, sid)
    _lib.simdist_guard_streams_changed()


@_guarded(0)
def _current(rank, device, which):
    d = rank.devices.get(device)
    if d is None:
        return 0  # no context on that device yet (autograd stashes every device's current stream)
    if which:
        return d.default_stream.id
    s = rank.current_streams.get(device)
    return (s or d.default_stream).id


@_guarded(None)
def _record_data(rank, key, device, sid):
    """recordDataPtrOnStream: autograd record_streams a gradient used on another stream than its producer's; a
    CUDA Future record_streams its value's storages on the streams that wait for it. The gradients are named by
    the tensors made during the backward pass (and its roots and initial gradients); a storage simdist cannot
    name (a Future's value made before) keeps its allocation stream only, as before this was modelled: that can
    only report a reuse a GPU would have delayed, never hide a race."""
    t = _tensor_of(rank, key)
    if t is not None and t._alloc is not None:
        t._alloc.record_stream(_stream(rank, device, sid))


@_guarded(0)
def _pool(rank, device, priority):
    """getStreamFromGlobalPool / getNewStream (a CUDA Future's then() callback stream, torch.Stream()): the next
    stream of the device's pool, the one torch.cuda.Stream() takes from (c10/cuda/CUDAStream.cpp getStreamFromPool),
    so the choice is per rank and device, as each process's c10 counter is."""
    return rank.device(device).new_stream(priority).id


@_guarded(None)
def _device(rank, index):
    """torch's C++ switched the device (the autograd engine runs a node under a guard of the node's device, then
    restores the caller's: engine.cpp evaluate_function), so the rank's ops and hooks in between are on it."""
    rank.device(index)
    rank.current_device = index


@_guarded(None)
def _synchronize_device(rank, device):
    rank.synchronize_device(device, "torch.accelerator.synchronize()")


class Callbacks(ctypes.Structure):
    _fields_ = [("record", ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64, ctypes.c_int, ctypes.c_int64)),
                ("block", ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int, ctypes.c_int64)),
                ("query", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int64)),
                ("synchronize_event", ctypes.CFUNCTYPE(None, ctypes.c_int64)),
                ("destroy", ctypes.CFUNCTYPE(None, ctypes.c_int64)),
                ("exchange", ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_int64)),
                ("synchronize_device", ctypes.CFUNCTYPE(None, ctypes.c_int)),
                ("current", ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int, ctypes.c_int)),
                ("record_data", ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_int64)),
                ("pool", ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int, ctypes.c_int)),
                ("device", ctypes.CFUNCTYPE(None, ctypes.c_int))]


def callbacks():
    """The struct the guard calls (kept alive by the caller for as long as the guard may call it)."""
    f = dict(Callbacks._fields_)
    return Callbacks(f["record"](_record), f["block"](_block), f["query"](_query),
                     f["synchronize_event"](_synchronize_event), f["destroy"](_destroy),
                     f["exchange"](_exchange), f["synchronize_device"](_synchronize_device),
                     f["current"](_current), f["record_data"](_record_data), f["pool"](_pool), f["device"](_device))
