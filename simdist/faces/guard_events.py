"""Streams and events as torch's C++ side sees them, through the fake CUDA device guard (simdist/faces/guard.py,
csrc/fake_cuda_guard.cpp): what C++ code records and waits on a CUDA device becomes markers and waits on the
simulated streams.

Who reaches this: a CUDA `ivalue::Future` (torch.futures.Future(devices=[cuda]); simdist's Work.get_future
returns one) records an event on the current stream of each of its devices when it completes, makes the current
streams wait for those events in `wait()` (Python's `fut.wait()`, and torch DDP's C++ Reducer in
`finalize_backward`), and runs each `then()` callback on a pool stream that first waits for them, its child future
recording its own events there (torch/include/ATen/core/ivalue_inl.h: markCompleted, synchronizeWithCurrentStreams,
invokeCallback); `torch.Event` and `torch.accelerator.current_stream()`. Stream 0 is the rank's current stream;
streams 1..32 are the device's pool streams (c10/cuda's pool has 32 per priority), which C++ exchanges in around a
future's callback.

The callbacks run inside torch's C++ code and must not raise into it: an error is made the run's fatal error and
the callback returns a neutral value.
"""
from __future__ import annotations

import contextlib
import ctypes
import itertools
import threading

from ..engine.context import current_rank

_markers = {}  # event id -> marker op (ids are unique in this process)
_ids = itertools.count(1)
_local = threading.local()  # .completing: (device index, marker) while a Work's future is being completed
_saved = {}  # (rank, device) -> the rank's current stream before a pool stream was exchanged in (None: default)


@contextlib.contextmanager
def completing(device, marker):
    """While a Work's future is marked complete: its event on `device` is the collective's own end marker (the
    event ProcessGroupNCCL's future records on the NCCL stream), not a marker of the caller's current stream."""
    _local.completing = (device, marker)
    try:
        yield
    finally:
        _local.completing = None


def _stream(rank, device, sid):
    if sid == 0:
        return rank.current_stream(device)
    return rank.device(device).pool_stream(sid)


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
    key = (rank.rank, device)
    if sid == 0:
        prev = _saved.pop(key, None)
        if prev is None:
            rank.current_streams.pop(device, None)
        else:
            rank.current_streams[device] = prev
        return
    if key not in _saved:
        _saved[key] = rank.current_streams.get(device)
    rank.current_streams[device] = rank.device(device).pool_stream(sid)


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
                ("synchronize_device", ctypes.CFUNCTYPE(None, ctypes.c_int))]


def callbacks():
    """The struct the guard calls (kept alive by the caller for as long as the guard may call it)."""
    f = dict(Callbacks._fields_)
    return Callbacks(f["record"](_record), f["block"](_block), f["query"](_query),
                     f["synchronize_event"](_synchronize_event), f["destroy"](_destroy),
                     f["exchange"](_exchange), f["synchronize_device"](_synchronize_device))
