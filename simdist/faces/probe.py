"""Output specs read off the real kernel: simdist places an op's outputs from its meta kernel (dispatch.py
_out_specs), and a meta kernel can disagree with the CPU and CUDA kernels, which share their C++ (TensorIterator,
the dtype tables). Once per signature, where the spec is cached, the real op runs on zero-filled host tensors of
the arguments' shapes, strides and dtypes, and where its outputs' sizes or strides differ from the meta kernel's,
the real ones are used. Found by the differential tier (tests/test_differential.py):

- the meta kernels of elementwise ops keep a size-1 dim's stride where TensorIterator resets it (neg of a
  (1, 1, 2, 2) channels_last tensor: (4, 1, 2, 1) vs (4, 4, 2, 1)), which changes the suggested memory format of
  the result, and so the layout of what is computed from it (torch.stack of it);
- a kernel whose result views a larger storage than its extent keeps it (soft_margin_loss with a reduction
  reduces a buffer of the input's size and resize_s it to the result: its storage keeps the buffer's bytes);
- a kernel that does not implement a dtype (float8 arithmetic: `"add_stub" not implemented for
  'Float8_e4m3fn'`) is refused at the call, on the host, as a GPU refuses it, not when the kernel runs at the
  next sync.

Only small signatures are probed (arguments of at most PROBE_BYTES): a larger op keeps the meta kernel's spec
(and the fixes of rules/meta_fixes.py). Random ops are not probed (they would draw from a generator). Any other
error of the probe is ignored: on zeros, an op may refuse what its real arguments allow (a Cholesky factor).
"""
from __future__ import annotations

import warnings

import torch

from .tensor import HostProxy, SimTensor

PROBE_BYTES = 1 << 16


def _size(a):
    t = type(a)
    if t is SimTensor or t is HostProxy:
        return a.numel() * a.element_size()
    if t is list or t is tuple:
        return sum(_size(x) for x in a)
    if isinstance(a, torch.Tensor):
        return a.numel() * a.element_size()
    return 0


def _zeros(a):
    t = type(a)
    if t is SimTensor or t is HostProxy:
        s = a if t is SimTensor else a._sim
        z = torch.empty_strided(tuple(s.shape), tuple(s.stride()), dtype=s.dtype)
        if z.untyped_storage().nbytes():
            torch.empty(0, dtype=torch.uint8).set_(z.untyped_storage()).zero_()
        return z
    if t is list or t is tuple:
        return t(_zeros(x) for x in a)
    return a


def _spec(r):
    if r is None:
        return None
    shape, stride = tuple(r.shape), tuple(r.stride())
    ext = 0 if 0 in shape else (1 + sum((d - 1) * s for d, s in zip(shape, stride))) * r.element_size()
    nb = r.untyped_storage().nbytes()
    if nb > ext and r.storage_offset() == 0:  # the kernel's storage is larger than the result's view of it
        return (shape, stride, r.dtype, nb)
    return (shape, stride, r.dtype)


def probe_specs(func, args, kwargs, out, random):
    """`out` (the meta kernel's [(shape, stride, dtype) | None, ...], is_seq) corrected by the real kernel's."""
    if random or (_size(args) + _size(list(kwargs.values()))) > PROBE_BYTES:
        return out
    cargs = tuple(_zeros(a) for a in args)
    ckw = {k: _zeros(v) for k, v in kwargs.items()}
    if ckw.get("device") is not None:
        ckw["device"] = torch.device("cpu")
    try:
        res = func(*cargs, **ckw)
    except NotImplementedError as e:
        if "not implemented for" in str(e):  # the kernel's dtype table refuses it: so would a GPU's, at the call
            raise
        return out
    except Exception:  # noqa: BLE001 - see the module docstring
        return out
    specs, seq = out
    real = [_spec(r) if isinstance(r, torch.Tensor) else None for r in (res if seq else (res,))]
    if len(real) != len(specs):
        return out
    # sizes and strides from the kernel; dtypes stay the meta kernel's, which are CUDA's where the two devices
    # differ (layer norm's float32 statistics of a bf16 input; rules/norms.py), and fixed by rules/meta_fixes.py
    # where the meta kernel is wrong for both
    fixed = [(r[0], r[1], s[2], *r[3:]) if r is not None and s is not None else s for r, s in zip(real, specs)]
    return (fixed, seq) if fixed != specs else out


# --- in-place ops: the host's checks at the call -------------------------------------------------------------------
# A GPU checks an in-place op's arguments on the host when it is called, before any kernel is queued: shapes,
# the dtype the result casts to, and memory overlap (ATen MemoryOverlap.cpp, TensorIterator's
# compute_mem_overlaps: "unsupported operation: more than one element of the written-to tensor refers to a single
# memory location" for an expanded or self-overlapping output, "some elements of the input tensor and the
# written-to tensor refer to a single memory location" for an input that partly overlaps it). simdist's CPU kernel
# makes the same checks only when it runs, at its virtual end: the error surfaced at a later synchronization, past
# the program's try/except, and the operation was queued meanwhile. Meta kernels check shapes and dtypes but never
# overlap (their storages have no addresses). So, once per signature (the arguments' layouts, dtypes, storage
# offsets, and which of them share a storage or are one tensor), the real op runs at the call on zero-filled host
# storages that alias exactly as the device storages do; an overlap error it raises is raised at the call, and so
# is a shape or dtype error the meta kernel raises too (on zeros an op may refuse what its real arguments allow:
# an integer division by zero). Random ops are not checked (they would draw from a generator); signatures whose
# storages exceed PROBE_BYTES keep the kernel-time check.
_INPLACE_OK: set = set()


def _alias_key(a, groups, objs, key):
    t = type(a)
    if t is SimTensor or t is HostProxy:
        s = a if t is SimTensor else a._sim
        al = s._alloc
        gi = next((i for i, g in enumerate(groups) if g is al), None)
        if gi is None:
            gi = len(groups)
            groups.append(al)
        oi = next((i for i, o in enumerate(objs) if o is s), None)
        if oi is None:
            oi = len(objs)
            objs.append(s)
        key.append((s._spec, s.storage_offset(), gi, oi))
    elif t is list or t is tuple:
        key.append(len(a))
        for x in a:
            _alias_key(x, groups, objs, key)
    elif isinstance(a, torch.Tensor):
        key.append(("cpu", tuple(a.shape), tuple(a.stride()), a.dtype, a.item() if a.dim() == 0 else None))
    else:
        key.append((t, a))


def _scratch(a, storages, made):
    t = type(a)
    if t is SimTensor or t is HostProxy:
        s = a if t is SimTensor else a._sim
        m = made.get(id(s))
        if m is None:
            st = storages.get(id(s._alloc))
            if st is None:
                st = storages[id(s._alloc)] = torch.zeros(s._alloc.nbytes, dtype=torch.uint8).untyped_storage()
            m = made[id(s)] = torch.empty(0, dtype=s.dtype).set_(st, s.storage_offset(), tuple(s.shape),
                                                                 tuple(s.stride()))
        return m
    if t is list or t is tuple:
        return t(_scratch(x, storages, made) for x in a)
    if isinstance(a, torch.Tensor) and a.dim() != 0:
        return a.clone()  # (a host tensor argument: never written by a device op, kept apart anyway)
    return a


def check_inplace(func, args, kwargs, random):
    """Raise, at the call, what the host code of this in-place op raises for these arguments (see above)."""
    if random:
        return
    groups, objs, key = [], [], [func]
    for a in args:
        _alias_key(a, groups, objs, key)
    for k, v in kwargs.items():
        key.append(k)
        _alias_key(v, groups, objs, key)
    try:
        key = tuple(key)
        if key in _INPLACE_OK:
            return
    except TypeError:
        key = None
    if sum(g.nbytes for g in groups) > PROBE_BYTES:
        return
    storages, made = {}, {}
    sargs = tuple(_scratch(a, storages, made) for a in args)
    skw = {k: _scratch(v, storages, made) for k, v in kwargs.items()}
    try:
        with warnings.catch_warnings():  # (an out= resize warns: the real call warns once, as torch does)
            warnings.simplefilter("ignore")
            func(*sargs, **skw)
    except (RuntimeError, ValueError, TypeError, IndexError) as e:
        if str(e).startswith("unsupported operation:") or _meta_refuses(func, args, kwargs, type(e)):
            raise
        # (a refusal of the zeros, not of the arguments: the kernel decides when it runs)
    except Exception:  # noqa: BLE001 - NotImplementedError and the like: the kernel decides
        pass
    if key is not None:
        _INPLACE_OK.add(key)


def _meta(a):
    t = type(a)
    if t is SimTensor or t is HostProxy:
        s = a if t is SimTensor else a._sim
        return torch.empty_strided(tuple(s.shape), tuple(s.stride()), dtype=s.dtype, device="meta")
    if t is list or t is tuple:
        return t(_meta(x) for x in a)
    if isinstance(a, torch.Tensor) and a.dim() != 0:
        return torch.empty_strided(tuple(a.shape), tuple(a.stride()), dtype=a.dtype, device="meta")
    return a


def _meta_refuses(func, args, kwargs, etype):
    try:
        func(*(_meta(a) for a in args), **{k: _meta(v) for k, v in kwargs.items()})
    except etype:
        return True
    except Exception:  # noqa: BLE001
        return False
    return False


def refuse_on_zeros(func, args, kwargs, etype):
    """Raise what the real op raises on zero-filled host tensors of its arguments' layouts (the meta kernel
    refused them with an `etype`): an argument error, not one of the data. (The real kernel's type may differ
    from the meta kernel's: cat of tensors of different ranks along a dim past the first's is an IndexError on
    CPU and CUDA, a RuntimeError from the meta kernel.)"""
    cargs = tuple(_zeros(a) for a in args)
    ckw = {k: _zeros(v) for k, v in kwargs.items()}
    if ckw.get("device") is not None:
        ckw["device"] = torch.device("cpu")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            func(*cargs, **ckw)
    except (etype, RuntimeError, IndexError, TypeError, ValueError) as e:
        if isinstance(e, NotImplementedError) or "ZeroDivisionError" in str(e):
            return  # no kernel for the zeros' path, or the zeros themselves refused: the data decides
        raise
    except Exception:  # noqa: BLE001 - another refusal: of the zeros, not of the arguments
        return
