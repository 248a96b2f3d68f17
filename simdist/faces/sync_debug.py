"""torch.cuda.set_sync_debug_mode: a warning or an error at each synchronizing CUDA call, as c10 gives it.

c10/cuda/CUDAFunctions.h: `memcpy_and_sync` (every blocking copy between host and device: `.item()`, `.cpu()`,
`.tolist()`, a blocking host-to-device copy from pageable or pinned memory, `torch.tensor(..., device="cuda")`) and
`stream_synchronize` (`Stream.synchronize()`, and the ops whose output size depends on the data: nonzero,
masked_select, boolean indexing, unique, repeat_interleave of a tensor) call `warn_or_error_on_sync()` when the mode
is not "default": TORCH_WARN "called a synchronizing CUDA operation" (a UserWarning) in "warn" mode (1), a
RuntimeError with that text in "error" mode (2). `torch.cuda.synchronize()` (cudaDeviceSynchronize),
`Event.synchronize()`, and non_blocking copies do not. Measured on an H200 with torch 2.11 for each of those calls
(x-series GPU run, 2026-12-02). The mode is the process's (here: the rank's).
"""
from __future__ import annotations

import warnings

MODES = {"default": 0, "warn": 1, "error": 2}
MESSAGE = "called a synchronizing CUDA operation"


def mode(me):
    return getattr(me, "sync_debug_mode", 0)


def set_mode(me, debug_mode):
    """torch/cuda/__init__.py set_sync_debug_mode: a str of MODES or an int 0..2."""
    if isinstance(debug_mode, str):
        if debug_mode not in MODES:
            raise RuntimeError("invalid value of debug_mode, expected one of `default`, `warn`, `error`")
        debug_mode = MODES[debug_mode]
    if debug_mode not in (0, 1, 2):
        raise RuntimeError("invalid value of debug_mode, expected one of 0, 1, 2")
    if debug_mode:
        warnings.warn("Synchronization debug mode is a prototype feature and does not yet detect all "
                      "synchronizing operations", UserWarning, stacklevel=3)
    me.sync_debug_mode = debug_mode


def synchronizing(me):
    """Called where c10 calls warn_or_error_on_sync(), before the host blocks."""
    m = getattr(me, "sync_debug_mode", 0)
    if m == 1:
        warnings.warn(MESSAGE, UserWarning, stacklevel=3)
    elif m == 2:
        raise RuntimeError(MESSAGE)
