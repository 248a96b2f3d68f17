"""The fake CUDA device guard that lets autograd run on simulated CUDA tensors (CPU builds of torch only).

Autograd records, for every tensor it sees, the stream current on its device; it asks
`c10::impl::getDeviceGuardImpl(CUDA)`, which a CPU build of torch does not have, and the process aborts
("PyTorch is not linked with support for cuda devices", thrown where no one can catch it). This module
builds a tiny C++ library (csrc/fake_cuda_guard.cpp) with torch.utils.cpp_extension into the torch
extensions cache (once per source/torch version; about 3 s) and loads it at `import simdist`.

The library registers nothing by itself. `set_enabled(True)` (simdist.patches.Installed, while a run is
installed) puts its impl into torch's CUDA slot of the device-guard registry and `set_enabled(False)`
takes it out again; likewise torch's (CPU-build, default) CUDA hooks object gets the library's vtable while
enabled, so at::getAccelerator() reports CUDA (autograd asks it for gradient streams), and its own vtable back
afterwards (docs/autograd.md). Outside a run torch behaves exactly as before: `torch.empty(1, device="cuda")`
raises as it did. A pointer torch cached while the impl was in (a torch.Event made inside a run) raises
that same error once the run is over, except for what destroying an event made in the run needs: while such
events live the impl stays in the slot (a CUDA Future destroys its events under a device guard of their device:
ATen/core/ivalue_inl.h ~Future; notes b2), its device exchange only records the index and every other method
raises as disabled; the slot empties when the last of them is destroyed (`draining()`).

On a torch build with CUDA the library is never built or loaded (the real guard is in place). If the
build fails, simdist warns once and autograd on simulated tensors stays refused.
Set SIMDIST_NO_AUTOGRAD=1 to skip the build (autograd refused, as without a compiler).
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import threading
import time
import warnings

import torch

from ..engine.errors import SimulationError

_lock = threading.Lock()
_lib = None  # the ctypes handle once loaded
_callbacks = None  # simdist's streams and events behind the guard's (simdist/faces/guard_events.py)
_tried = False
_reason = "not loaded yet"

_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "csrc", "fake_cuda_guard.cpp")


def _name():
    """The library's name in the extensions cache, one per source text: two simdist checkouts of different
    versions on one machine (a benchmark of an earlier commit next to this tree) rebuilt each other's copy under
    one name, and a process that loaded the other's (a missing symbol) ran without the guard, so CUDA futures
    ordered the current stream at get_future() and races behind them went unreported."""
    with open(_SOURCE, "rb") as f:
        # (the torch version too: a library built against another torch's headers must not be loaded as is)
        return "simdist_fake_cuda_guard_" + hashlib.sha1(f.read() + torch.__version__.encode()).hexdigest()[:12]


def _torch_has_cuda():
    return torch.version.cuda is not None or torch.backends.cuda.is_built()


_STALE_LOCK_S = 300  # a build takes seconds; a lock this old was left by a process killed while building


def _build():
    from torch.utils import cpp_extension
    return cpp_extension.load(_name(), [_SOURCE], extra_cflags=["-O1"], is_python_module=False, verbose=False)


def _open_library():
    """The loaded library: the cached one, or, if that does not load (another process still linking it), the one
    torch's build (under its lock) leaves."""
    path = _built_library()
    try:
        return ctypes.CDLL(path)
    except OSError:
        return ctypes.CDLL(_build())


def _built_library():
    """The library's path, built first if the cache lacks it. A library of this name in the cache was built from
    this source for this torch (the name says so), so it is loaded without asking ninja: two checkouts on one
    machine share the cache, and each ninja call from the other one rebuilt it under torch's file lock. A lock
    left by a process killed while building would make every later import wait forever (torch's FileBaton polls
    without a timeout): an old one is removed."""
    from torch.utils import cpp_extension
    name = _name()
    try:
        build = cpp_extension._get_build_directory(name, verbose=False)
    except Exception:  # noqa: BLE001  (a private helper: if it moved, build as torch would)
        build = None
    if build is not None:
        built = os.path.join(build, name + ".so")
        if os.path.exists(built):
            return built
        lock = os.path.join(build, "lock")
        try:
            if time.time() - os.path.getmtime(lock) > _STALE_LOCK_S:
                os.remove(lock)
        except OSError:
            pass
    return _build()


def load(warn=True):
    """Build (if needed) and load the library; True when autograd on simulated tensors is available."""
    global _lib, _tried, _reason
    with _lock:
        if _tried:
            return _lib is not None
        _tried = True
        if _torch_has_cuda():
            _reason = "torch is built with CUDA: the real CUDA device guard is used, simdist's is not loaded"
            return False
        if os.environ.get("SIMDIST_NO_AUTOGRAD"):
            _reason = "SIMDIST_NO_AUTOGRAD is set"
            return False
        try:
            lib = _open_library()
            lib.simdist_guard_set_enabled.argtypes = [ctypes.c_int]
            lib.simdist_guard_set_enabled.restype = ctypes.c_int
            lib.simdist_guard_enabled.restype = ctypes.c_int
            lib.simdist_guard_set_device.argtypes = [ctypes.c_int]
            lib.simdist_guard_set_device.restype = None
            lib.simdist_guard_set_callbacks.argtypes = [ctypes.c_void_p]
            lib.simdist_guard_set_callbacks.restype = None
            lib.simdist_guard_streams_changed.argtypes = []
            lib.simdist_guard_streams_changed.restype = None
            lib.simdist_guard_storage_key.argtypes = [ctypes.c_void_p]
            lib.simdist_guard_storage_key.restype = ctypes.c_void_p
            if not lib.simdist_guard_hooks_ours():
                raise RuntimeError("torch's CUDA hooks are not the CPU build's default ones")
        except Exception as e:  # noqa: BLE001  (no compiler, no ninja, a header mismatch...)
            _reason = f"building simdist's fake CUDA device guard failed: {type(e).__name__}: {e}"
            if warn:
                warnings.warn(f"{_reason.splitlines()[0][:500]}\nsimdist runs without autograd on simulated "
                              "CUDA tensors (backward() raises UnsupportedOperation).", RuntimeWarning,
                              stacklevel=2)
            return False
        global _callbacks
        from . import guard_events
        guard_events.bind(lib)
        _callbacks = guard_events.callbacks()  # (alive as long as the library: the guard calls it)
        lib.simdist_guard_set_callbacks(ctypes.addressof(_callbacks))
        _lib = lib
        _reason = ""
        return True


def available():
    """Whether autograd on simulated CUDA tensors is supported in this process."""
    return _lib is not None


def reason():
    """Why available() is False ('' when it is True)."""
    return _reason


def set_enabled(on):
    """Put the fake CUDA guard into torch's registry (on) or take it out (off). Returns whether it is in."""
    if _lib is None:
        return False
    r = _lib.simdist_guard_set_enabled(1 if on else 0)
    if on and not r:
        raise SimulationError("another CUDA device guard is registered in torch; simdist cannot install its own")
    return bool(r)


def set_device(index):
    """Tell torch's C++ side (the fake guard's thread-local device) the calling rank's current device."""
    if _lib is not None:
        _lib.simdist_guard_set_device(int(index))


def streams_changed():
    """A rank's current stream changed or it made a device: what the guard cached of simdist's answers is stale
    (its getStream is asked for every tensor autograd records)."""
    if _lib is not None:
        _lib.simdist_guard_streams_changed()


def enabled():
    return _lib is not None and bool(_lib.simdist_guard_enabled())


def draining():
    """True while the impl stays in torch's registry after a run because events recorded in the run still live
    (a CUDA Future held past the run: its destructor needs the guard; notes b2); it leaves with the last of them."""
    return _lib is not None and bool(_lib.simdist_guard_draining())
