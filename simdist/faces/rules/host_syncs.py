"""Ops whose CUDA implementation synchronizes the host with the current stream although their output size is
known in advance (so the generic path would run them asynchronously). Measured on an H200 with torch 2.11 through
torch.cuda.set_sync_debug_mode("warn") (x-series GPU run, 2026-12-02; ci/gpu_x_facts.py's sibling probe):

- `torch.linalg.eigh` / `eigvalsh` (`_linalg_eigh`) and `torch.linalg.svd` / `svdvals` (`_linalg_svd`): the
  solver's info is copied to the host after the kernel (aten/src/ATen/native/BatchLinearAlgebra.cpp
  `_linalg_check_errors`); on a CPU build the check happens inside the CPU kernel, out of simdist's sight. The host
  here waits after the op.
- (`torch.histc` with min == max, the default, also synchronizes: SummaryOps.cu copies the input's min and max to
  the host first; measured two syncs. histc's rule lives in rules/intdiv.py (one op, one rule): not modelled yet.)
- `index_put_` with a boolean (or uint8) mask index and a tensor value (`v[mask] = t`): the mask becomes indices
  through nonzero first (aten/src/ATen/native/TensorAdvancedIndexing.cpp expandTensors); the host waits before.
  (`v[mask] = scalar` is a masked_fill_, no sync: measured.)
Each also gives set_sync_debug_mode's warning or error (faces/sync_debug.py). Other ops that synchronize on a GPU
with a static output size (linalg.eig, lstsq, lu_factor, matrix_rank, pinv ...) are not listed: not measured.
"""
from __future__ import annotations

import torch

from .. import sync_debug
from ..dispatch import _functional, _inplace
from ..op_info import op_info
from ..op_rules import register
from ..tensor import HostProxy, SimTensor

aten = torch.ops.aten


def _host_waits(me, dev_index, what):
    sync_debug.synchronizing(me)
    stream = me.current_stream(dev_index)
    me.wait_op(stream.record_marker(me.host), what)


def _first_sim(args):
    for a in args:
        if type(a) in (SimTensor, HostProxy):
            return a if type(a) is SimTensor else a._sim
    return None


@register(aten._linalg_eigh.default, aten._linalg_svd.default)
def _solver_then_info_check(me, func, args, kwargs):
    out = _functional(me, func, op_info(func), args, kwargs)
    s = _first_sim(args)
    if s is not None:
        _host_waits(me, s._dev.index, f"{op_info(func).name} (the solver's info copied to the host)")
    return out


@register(aten.index_put_.default, aten.index_put.default, aten._index_put_impl_.default)
def _index_put(me, func, args, kwargs):
    s = _first_sim(args)
    indices = args[1] if len(args) > 1 else kwargs.get("indices", ())
    values = args[2] if len(args) > 2 else kwargs.get("values")
    accumulate = args[3] if len(args) > 3 else kwargs.get("accumulate", False)
    defined = [i for i in indices if i is not None]
    masks = [i for i in defined if isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8)]
    # index_put_'s canDispatchToMaskedFill: one boolean mask and a one-element host value, not accumulating ->
    # masked_fill_(mask, value.item()), no nonzero and no sync
    to_masked_fill = (not accumulate and len(defined) == 1 and len(masks) == 1 and isinstance(values, torch.Tensor)
                      and type(values) not in (SimTensor, HostProxy) and values.numel() == 1)
    if s is not None and masks and not to_masked_fill:
        _host_waits(me, s._dev.index, "index_put_ with a boolean mask (nonzero of the mask)")
    info = op_info(func)
    return _inplace(me, func, info, args, kwargs) if func is not aten.index_put.default else \
        _functional(me, func, info, args, kwargs)
