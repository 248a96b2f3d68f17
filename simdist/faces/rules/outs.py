"""The op rule for `out=` arguments (every op whose schema writes a keyword-only argument: add.out, cat.out,
sort.values, _foreach_add.List_out...).

Rule (ATen Resize.cpp `resize_output`, structured kernels' `set_output_raw_strided`; docs "out= arguments"): an
`out` whose shape differs from the result's is resized to it (with a deprecation warning when it had elements),
its storage growing if needed, and given the strides the op computes; an `out` of the right shape keeps its
strides. Argument errors (shapes, dtypes that cannot be cast) are raised at the call, on the host, as a GPU
build raises them before any kernel is launched.

simdist runs the op on meta tensors first, for torch's checks and the result's shape; an `out` to be resized
takes the sizes and strides the real op gives its copy on the host (a meta kernel does not always follow the
inputs' layout as the CPU and CUDA kernels do: mul.out of a transposed input into an empty out), through its
storage (simdist/faces/rules/metadata.py _restride), before the kernel is queued. The CPU kernel then finds an `out` of the right shape and never resizes the view it writes (a resize
there would change the CPU view of the device bytes behind the simulated tensor's back: its metadata and its
bytes would disagree).
"""
from __future__ import annotations

import torch

from ..dispatch import _inplace, _sim_of, _to_meta, _unwrap
from ..op_info import op_info
from ..op_rules import set_out_rule
from ..probe import check_inplace
from ..tensor import SimTensor
from .metadata import _restride


_FITS: set = set()  # signatures (op, argument specs) whose outs already have the result's layout


def _out_rule(me, func, args, kwargs):
    info = op_info(func)
    # memory overlap of the outs as they are, before any resize (TensorIterator's build checks it first)
    check_inplace(func, args, kwargs, info.random)
    key = _unwrap(me, args, kwargs, True).key
    try:
        key = (func, tuple(key))
        if key in _FITS:
            return _inplace(me, func, info, args, kwargs)
    except TypeError:  # an unhashable argument: no cache
        key = None
    names = [n for n in info.mutable_names if kwargs.get(n) is not None]
    mkw = {k: _to_meta(v) for k, v in kwargs.items() if k != "generator"}
    try:
        func(*(_to_meta(a) for a in args), **mkw)
    except NotImplementedError:  # no meta kernel: the shapes cannot be known here; the kernel runs as it is
        return _inplace(me, func, info, args, kwargs)
    except Exception:  # noqa: BLE001
        _raise_real_error(me, func, args, kwargs)  # torch's own error when the real op refuses too
        return _inplace(me, func, info, args, kwargs)  # (a meta kernel's own limitation: run as it is)
    resized = []
    for n in names:
        sims, metas = kwargs[n], mkw[n]
        if not isinstance(sims, (list, tuple)):
            sims, metas = (sims,), (metas,)
        for i, (s, m) in enumerate(zip(sims, metas)):
            x = _sim_of(s)
            if type(x) is SimTensor and (tuple(x.shape) != tuple(m.shape) or tuple(x.stride()) != tuple(m.stride())):
                resized.append((n, i, x))
    if not resized and key is not None:
        _FITS.add(key)
    if resized:
        # the strides a resized out gets are the kernel's (TensorIterator follows its inputs' layout), which a
        # meta kernel does not always reproduce: read them off the real op, run on host copies
        real = _run_on_copies(me, func, args, kwargs)
        for n, i, x in resized:
            r = real[n] if not isinstance(real[n], (list, tuple)) else real[n][i]
            _restride(x, tuple(r.shape), tuple(r.stride()), x.storage_offset())
    return _inplace(me, func, info, args, kwargs)


def _run_on_copies(me, func, args, kwargs):
    """Run the op on host copies of its arguments (their values need not be current: only the op's checks and
    the layout of its outputs are read) and return the copied keyword arguments; raise what the op raises."""
    unwrapped = _unwrap(me, args, kwargs, False)

    def copy(a):
        if isinstance(a, torch.Tensor):
            return a.clone()
        if isinstance(a, (list, tuple)):
            return type(a)(copy(x) for x in a)
        return a
    kw = {k: copy(v) for k, v in unwrapped.kwargs.items()}
    func(*copy(unwrapped.args), **kw)
    return kw


def _raise_real_error(me, func, args, kwargs):
    _run_on_copies(me, func, args, kwargs)


set_out_rule(_out_rule)
