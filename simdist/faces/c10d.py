"""torch.distributed, simulated: a process group that torch's own c10d layer drives.

torch's Python layer (torch/distributed/distributed_c10d.py) runs unmodified inside a simulated rank:
init_process_group, new_group, the collectives, P2P, object collectives, _coalescing_manager,
batch_isend_irecv, DeviceMesh, DTensor, FSDP2, DDP. What simdist swaps is the backend it creates:
`ProcessGroupNCCL` (and `ProcessGroupGloo`) are SimProcessGroup, a real `torch.distributed.ProcessGroup`
subclass, so every caller, Python or C++ (DDP's Reducer, functional collectives), reaches its methods; the
rendezvous gives each rank a store of its own (ranks meet through simdist's engine, not a TCP store); and the
c10d registry of groups (`_world`) is per rank (in the thread transport, rank threads share the module).

Semantics (simdist/engine/collectives.py; FACTS.md; torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp):
- device tensors follow NCCL's stream semantics per profile (2.7: the group's internal stream, tensors
  record_stream-ed; 2.8+: `opts.asyncOp=False` on the current stream, async on the internal stream with its
  tensors stashed until wait() or until the host sees the collective complete, as the watchdog does);
- tensors must be CUDA and dense, and contiguous in their suggested memory format for collectives (a
  channels_last tensor is; NCCL moves its bytes in memory order); P2P takes any layout and moves `numel`
  elements of memory from the tensor's first byte, as NCCL does;
- CPU tensors need a gloo backend in the group's config (`cpu:gloo`), and are synchronous host rendezvous;
- NCCL has no bitwise reductions; PREMUL_SUM carries its factor; AVG on bool is refused;
- batch_isend_irecv's sends and receives are one NCCL group: they do not queue behind each other.
"""
from __future__ import annotations

import copy
import datetime
import importlib
import operator
import os
import threading
import types

import torch
import torch.distributed as dist

from ..engine import collectives as engine
from ..engine.context import current_rank, live_ranks
from ..engine.errors import CollectiveMismatch, NcclError, SimulationError, UnsupportedOperation
from ..engine.frames import capture_frames
from . import guard, guard_events
from .cuda import _refused
from .tensor import SimTensor


class DistBackendError(NcclError, dist.DistBackendError):
    """What ProcessGroupNCCL raises when NCCL refuses a call (torch.distributed.DistBackendError), as simdist
    reports it: code that catches torch's type catches this too."""

c10d = dist.distributed_c10d
_C = torch._C._distributed_c10d


def _rank():
    me = current_rank()
    if me is None:
        raise SimulationError("a simulated process group was used outside a simulated rank")
    return me


# --- helpers ---------------------------------------------------------------------------------
# gloo has ReduceOp.AVG from torch 2.8 (pytorch/pytorch#149781); c10's names of integer scalar types in errors
_TORCH = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
_GLOO_AVG = _TORCH >= (2, 8)
# A bfloat16 PREMUL_SUM factor reaches NCCL as a float read as 2 bytes (torch <= 2.11, measured: _premul_factor);
# for a later torch it is not known whether the fix (pull #190747) is in, so simdist refuses rather than guess
# (None). Tests set it to model the measured behaviour on any torch.
BF16_PREMUL_FACTOR_AS_FLOAT = True if _TORCH <= (2, 11) else None
_SCALAR_NAMES = {torch.int64: "Long", torch.int32: "Int", torch.int16: "Short", torch.int8: "Char",
                 torch.uint8: "Byte", torch.bool: "Bool"}


_orig_make_premul = getattr(dist, "_make_nccl_premul_sum", None)


def _make_nccl_premul_sum(factor):
    """dist._make_nccl_premul_sum: torch's ReduceOp, whose factor the rank's state remembers where the op does
    not carry it readably (torch 2.11's ReduceOp has no `.factor`, 2.13's has; measured on an H200)."""
    op = _orig_make_premul(factor)
    me = current_rank()
    if getattr(op, "factor", None) is None and me is not None and me.face is not None:
        state(me).premul_factors[id(op)] = (op, factor)
    return op


def _premul_factors():
    me = current_rank()
    return state(me).premul_factors if me is not None and me.face is not None else {}


def _redop_name(op, tensor=None):
    """The reduce op's name for signatures and reductions: 'SUM', 'MAX'..., 'PREMUL_SUM(0.5)'.

    A ReduceOp made by dist._make_nccl_premul_sum carries its factor. NCCL has no bitwise reductions
    (ProcessGroupNCCL getNcclReduceOp: "Cannot use ReduceOp.BAND with NCCL"); gloo (CPU tensors) has them."""
    if op is None:
        return "SUM"
    kind = getattr(op, "op", None)  # a ReduceOp instance (RedOpType inside); RedOpType has .name
    n = getattr(kind if kind is not None else op, "name", None) or str(kind if kind is not None else op)
    n = n.split(".")[-1].upper()
    cuda = tensor is not None and tensor.device.type == "cuda"
    if tensor is not None and not cuda and (n == "PREMUL_SUM" or (n == "AVG" and not _GLOO_AVG)):
        # a CPU tensor's collective runs on gloo (ProcessGroupGloo.cpp toFunction), which has no PREMUL_SUM, and
        # AVG only from torch 2.8 (pytorch/pytorch#149781)
        raise RuntimeError(f"Cannot use ReduceOp.{n} with Gloo")
    if tensor is not None and not cuda and n == "AVG":
        # gloo's AVG is a SUM, then the result divided in place by the group size: an integer tensor cannot take
        # the float quotient (measured, torch 2.13 gloo: "result type Float can't be cast to the desired output
        # type Long"); floats round as that division does, not as NCCL's pre-multiplied sum
        if not (tensor.is_floating_point() or tensor.is_complex()):
            raise RuntimeError(f"result type Float can't be cast to the desired output type "
                               f"{_SCALAR_NAMES.get(tensor.dtype, str(tensor.dtype))}")
        return "SUM_THEN_DIV"
    if tensor is not None and not cuda and n in ("BAND", "BOR", "BXOR") and tensor.is_floating_point():
        raise RuntimeError(f"Cannot use ReduceOp.{n} with non-integral dtype")  # gloo's band / bor / bxor
    if cuda and tensor.dtype in _FP8_UNREDUCIBLE:  # ProcessGroupNCCL: fnuz and e8m0 have no NCCL reduction
        raise RuntimeError("Unsupported Float8 type for NCCL reduction")
    if n == "PREMUL_SUM":
        if cuda and tensor.dtype not in _PREMUL_DTYPES:  # getNcclReduceOp's switch over the NCCL datatype
            raise TypeError("PreMulSum Data type must be half, float, bfloat16 or double")
        f = getattr(op, "factor", None)
        if f is None:
            f = _premul_factors().get(id(op), (None, None))[1]
        if f is None:
            raise UnsupportedOperation("ReduceOp.PREMUL_SUM needs a factor: use dist._make_nccl_premul_sum(f)")
        return f"PREMUL_SUM({_premul_factor(f, tensor if cuda else None)!r})"
    if cuda and tensor.dtype in _FP8_NCCL:
        if n == "AVG":  # measured on an H200 (torch 2.11, NCCL 2.28): ncclAvg has no fp8 kernel
            raise DistBackendError(f"NCCL error in: /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp, invalid argument (ncclAvg of a "
                                   f"{tensor.dtype} tensor: NCCL has no average of float8)")
        raise UnsupportedOperation(
            f"an NCCL reduction ({n}) of a {tensor.dtype} tensor is not modelled by simdist: NCCL >= 2.24 reduces "
            "float8 natively (an H200 with torch 2.11 / NCCL 2.28 runs SUM, MAX, MIN and PRODUCT), but in which "
            "precision and order it rounds partial results is not modelled; gathers and broadcasts of float8 are")
    if n in ("BAND", "BOR", "BXOR") and cuda:
        raise ValueError(f"Cannot use ReduceOp.{n} with NCCL")
    if n == "AVG" and cuda and tensor.dtype == torch.bool:
        raise TypeError("Cannot use ReduceOp.AVG with boolean inputs")
    if n not in ("SUM", "AVG", "PRODUCT", "MAX", "MIN", "BAND", "BOR", "BXOR"):
        raise UnsupportedOperation(f"reduce op {n} is not modelled by simdist")
    if n == "SUM" and cuda and tensor.dtype == torch.bool:
        return "MAX"  # ProcessGroupNCCL maps SUM of bools to MAX (a bitwise or) against uint8 overflow
    return n


# NCCLUtils.hpp ncclDataType: the dtypes ProcessGroupNCCL maps to an NCCL datatype. Others are refused before any
# collective or P2P runs (getNcclDataType: TypeError "Input tensor data type is not supported for NCCL process
# group: Short"; all_to_all goes through torch/csrc/cuda/nccl.cpp: RuntimeError "Unconvertible NCCL type Short").
# Measured on an H200 (torch 2.11, NCCL 2.28; ci/gpu_z_nccl_facts.py, docs/gpu/z-series-nccl-facts-2026-12-02.json).
_NCCL_UNMAPPED = {getattr(torch, n): c for n, c in (
    ("int16", "Short"), ("uint16", "UInt16"), ("uint32", "UInt32"), ("uint64", "UInt64"),
    ("float8_e8m0fnu", "Float8_e8m0fnu")) if hasattr(torch, n)}
_FP8_NCCL = frozenset(getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2") if hasattr(torch, n))
_FP8_UNREDUCIBLE = frozenset(getattr(torch, n) for n in ("float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu")
                             if hasattr(torch, n))
_PREMUL_DTYPES = frozenset((torch.float16, torch.float32, torch.float64, torch.bfloat16))


def _premul_factor(f, tensor):
    """The factor NCCL multiplies by, as ProcessGroupNCCL hands it over (getNcclReduceOp -> unpackPreMulSum<T,
    dataType>): a host scalar converted to T, or a device tensor read as T through const_data_ptr<T>(). For bfloat16
    data T is float (torch <= 2.11: pytorch/pytorch#190745, fixed by pull #190747) while NCCL reads a 2-byte
    bfloat16 from it: the factor is the bfloat16 whose bits are the low half of the float32 (every power of two
    reads as 0: the reduction comes back all zeros; measured on an H200 with torch 2.11 / NCCL 2.28). A factor
    tensor must be on the device (on the CPU NCCL dereferences a host pointer on the GPU: an illegal memory access,
    measured) and of dtype T (const_data_ptr<T> checks it)."""
    if tensor is not None and tensor.dtype == torch.bfloat16 and BF16_PREMUL_FACTOR_AS_FLOAT is None:
        raise UnsupportedOperation(
            f"ReduceOp.PREMUL_SUM of a bfloat16 tensor under torch {torch.__version__} is not modelled by simdist: "
            "torch <= 2.11 hands NCCL the factor as a float that NCCL reads as a bfloat16, its low half (zeros for "
            "every power of two, measured on an H200: pytorch/pytorch#190745); whether this torch carries the fix "
            "is not measured. Use ReduceOp.AVG, or SUM and a division, or reduce in float32")
    if isinstance(f, torch.Tensor):
        if tensor is None:
            return f.item()
        if f.device.type != "cuda":
            raise UnsupportedOperation(
                "a PREMUL_SUM factor tensor on the CPU: NCCL reads the factor from device memory (ncclScalarDevice), "
                "so on a GPU the collective dereferences a host pointer (an illegal memory access on an H200, "
                "measured): put the factor on the device, or pass a Python float")
        want = torch.float32 if tensor.dtype == torch.bfloat16 else tensor.dtype
        if f.dtype != want:
            raise RuntimeError(f"expected scalar type {_c10_name(want)} but found {_c10_name(f.dtype)}")
        v = float(f.reshape(-1)[0].item())
    else:
        v = float(f)
    if tensor is None:
        return v
    if tensor.dtype == torch.bfloat16:
        bits = torch.tensor([v], dtype=torch.float32).view(torch.int16)[0:1]  # little-endian: the low half first
        return float(bits.view(torch.bfloat16).item())
    return float(torch.tensor(v, dtype=tensor.dtype).item())  # T(double_factor): the factor NCCL multiplies by


def _c10_name(dt):
    return {torch.float32: "Float", torch.float64: "Double", torch.float16: "Half",
            torch.bfloat16: "BFloat16"}.get(dt, str(dt).replace("torch.", ""))


def _sig_t(t):
    return (tuple(t.shape), str(t.dtype).replace("torch.", ""))


def _split_sizes(sizes, t, n):
    """all_to_all_single's split sizes as ProcessGroup's C++ binding converts them (a sequence of integers, None
    or empty for equal splits), checked as c10d::checkSplitSizes does (TORCH_CHECK: RuntimeError)."""
    sizes = [operator.index(s) for s in (() if sizes is None else sizes)]
    if not sizes:
        if t.shape[0] % n:
            raise RuntimeError(f"Tensor's dim 0 does not divide equally across group size ({t.shape[0]} rows, "
                               f"{n} ranks)")
        return [t.shape[0] // n] * n
    if len(sizes) != n:
        raise RuntimeError(f"Number of tensor splits not equal to group size ({len(sizes)} splits, {n} ranks)")
    if sum(sizes) != t.shape[0]:
        raise RuntimeError(f"Split sizes doesn't match total dim 0 size ({sizes} for {t.shape[0]} rows)")
    return sizes


def _desc(kind, tensors, extra=""):
    ts = ", ".join(f"{d}{list(s)}" for s, d in (_sig_t(t) for t in tensors))
    return f"{kind}({ts}{', ' + extra if extra else ''})"


def _dense_format(t):
    return t.is_contiguous(memory_format=torch.channels_last) if t.dim() == 4 else (
        t.is_contiguous(memory_format=torch.channels_last_3d) if t.dim() == 5 else False)


def _check(me, t, what, p2p=False):
    """ProcessGroupNCCL's check_gpu_single_tensor: CUDA and dense; contiguous in its suggested memory format
    for collectives (P2P takes any layout)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{what}: expected a tensor, got {type(t).__name__}")
    if not isinstance(t, SimTensor):
        return t
    if t.is_sparse:
        raise ValueError("Tensors must be CUDA and dense")
    unmapped = _NCCL_UNMAPPED.get(t.dtype)
    if unmapped is not None:
        if what.startswith("all_to_all"):
            raise RuntimeError(f"Unconvertible NCCL type {unmapped}")
        if t.dtype in _FP8_UNREDUCIBLE and what.startswith(("all_reduce", "reduce_scatter")):
            raise RuntimeError("Unsupported Float8 type for NCCL reduction")
        raise TypeError(f"Input tensor data type is not supported for NCCL process group: {unmapped}")
    if t._dev.rank != me.rank:
        raise SimulationError(f"{what}: rank {me.rank} passed a tensor of rank {t._dev.rank}")
    if not p2p and not (t.is_contiguous() or _dense_format(t)):
        raise ValueError("Tensors must be contiguous")
    return t


class _Region:
    """A view of a simulated tensor's bytes in memory order: what NCCL moves (its `numel` elements from the
    first byte). Accesses are recorded on the tensor's allocation like any kernel's (simdist/engine/launch.py)."""

    __slots__ = ("_alloc", "_span", "_inner", "_dev", "shape", "dtype")

    def __init__(self, t):
        inner = t._inner
        if not inner.is_contiguous():
            n = inner.numel()
            isz = inner.element_size()
            block = t._alloc.block
            lo = inner.storage_offset() * isz
            if block is None or lo + n * isz > block.offset + block.size:
                raise UnsupportedOperation(
                    f"NCCL would move {n} elements of memory from the first byte of a {list(t.shape)} "
                    f"tensor with strides {list(t.stride())}: past its allocation (not modelled by simdist)")
            inner = inner.as_strided((n,), (1,), inner.storage_offset())
        self._alloc = t._alloc
        self._span = None
        self._inner = inner
        self._dev = t._dev
        self.shape = t.shape
        self.dtype = t.dtype

    def numel(self):
        return self._inner.numel()

    def element_size(self):
        return self._inner.element_size()


def _region(t):
    if not isinstance(t, SimTensor):
        return t
    return t if t._inner.is_contiguous() else _Region(t)


# --- works and futures --------------------------------------------------------------------------
class SimWork(dist.Work):
    """The handle of a simulated collective (c10d Work; C++ callers reach these methods too)."""

    def __init__(self, me, marker=None, stash=None, outputs=(), host_blocking=False, what="collective",
                 parts=()):
        super().__init__()
        self._rs = me
        self._marker = marker
        self._stash = stash
        self._outputs = list(outputs)
        self._host_blocking = host_blocking
        self._what = what
        self._parts = list(parts)  # the works of a coalesced group
        self._started = me.host.clock  # WorkNCCL's workStartTime_: a timed wait's timeout counts from here
        self._blocking = None  # (end marker, group timeout) under TORCH_NCCL_BLOCKING_WAIT (SimProcessGroup._run)
        self._gloo = None  # an async gloo collective's stand-in op until the host waits for it (_gloo_pending)
        self._flushes = ()  # a gloo barrier's: the group's async gloo works, complete once it is waited
        self._cpu = False  # a gloo collective's (CPU tensors): its future is a CPU future (_gloo_future)

    def wait(self, timeout=None):
        """The current stream waits for the work; the host too for a barrier, or when a timeout is given
        (ProcessGroupNCCL.cpp WorkNCCL::wait: "In case of blockingWait or a timeout value is specified by the
        user, we block the CPU thread until the work is completed or timed out"; no timeout is kNoTimeout, 0 ms)."""
        me = _rank()
        for p in self._parts:
            p.wait(timeout)
        m = self._marker
        if m is not None:
            me.current_stream(m.stream.dev.index).wait_marker(me.host, m)
            if _gives_timeout(timeout):
                self._wait_until(me, m, timeout)
            elif self._host_blocking:
                me.wait_op(m, self._what)
        b = self._blocking
        if b is not None and not _gives_timeout(timeout):
            # TORCH_NCCL_BLOCKING_WAIT: the host waits too, up to the group's timeout (WorkNCCL::wait
            # `if (blockingWait_ || timeout != kNoTimeout)`, checkTimeout with the work's opTimeout_)
            self._wait_until(me, b[0], b[1])
        if self._stash is not None:
            _in_flight(me).release(self._stash)
            self._stash = None
        self._gloo_done(me)
        for w in self._flushes:
            w._gloo_done(me)
        self._flushes = ()
        return True

    def _gloo_done(self, me):
        """The host knows an async gloo collective has completed (wait, a True is_completed, its future)."""
        op = self._gloo
        if op is not None:
            me.host.join_clock({op.stream.id: op.seq})
            self._gloo = None

    def _wait_until(self, me, m, timeout):
        """The host waits for the work, but not past its start + timeout (WorkNCCL::synchronize: with a timeout
        given it polls isCompleted(); checkTimeout then records "Watchdog caught collective operation timeout:
        ... ran for N milliseconds before timing out" and the wait throws it as DistBackendError). A collective
        that ends first is an ordinary wait."""
        ms = timeout.total_seconds() * 1e3 if hasattr(timeout, "total_seconds") else float(timeout)
        deadline = self._started + int(ms * 1_000_000)
        if not me.wait_op_until(m, deadline, f"{self._what} (Work.wait with a {ms:.0f} ms timeout)"):
            raise DistBackendError(
                f"Watchdog caught collective operation timeout: WorkNCCL({self._what}) ran for "
                f"{(me.host.clock - self._started) / 1e6:.0f} milliseconds before timing out (simulated time: "
                "a peer never joined it, or it did not end within the timeout)")

    def synchronize(self):
        self.wait()

    def is_completed(self):
        me = _rank()
        if not all(p.is_completed() for p in self._parts):
            return False
        m = self._marker
        if m is None or (m.end is not None and m.end <= me.host.clock):
            if m is not None:
                me.wait_op(m, "Work.is_completed()")  # the host may read what the work wrote (a CPU output)
            self._gloo_done(me)
            return True
        me.poll_pending(m, "Work.is_completed()")
        return False

    def is_success(self):
        raise NotImplementedError("WorkNCCL::isSuccess() is deprecated")  # as ProcessGroupNCCL's Work, measured

    def exception(self):
        return None

    def result(self):
        out = list(self._outputs)
        for p in self._parts:
            out += p.result()
        return out

    def source_rank(self):
        raise RuntimeError("sourceRank() may only be called on recv or recvAnysource work objects")

    def get_future(self):
        """ProcessGroupNCCL's future: a CUDA future of the outputs, complete at once, whose event is the
        collective's end on its stream. Whoever waits it (`fut.wait()`, torch DDP's C++ Reducer) makes its current
        stream wait for the collective; a `then()` callback runs on a pool stream that waits first; `value()` alone
        orders nothing (simdist/faces/guard_events.py). Without simdist's fake guard (a CUDA build of torch) C++
        waits cannot be seen: the current stream waits here instead, earlier than on a GPU (never a wrong value;
        a race that needs that wait removed goes unreported)."""
        me = _rank()
        m = self._marker
        if self._is_gloo():
            return self._gloo_future(me)
        if not guard.enabled():
            self.wait()
            fut = torch.futures.Future()
            fut.set_result(self.result())
            return fut
        work = self
        while m is None and work._parts:  # a coalesced work: its parts ran in order on the group's stream
            work = work._parts[-1]
            m = work._marker
        dev = m.stream.dev.index if m is not None else me.current_device
        fut = torch.futures.Future(devices=[torch.device("cuda", dev)])
        with guard_events.completing(dev, m):
            fut.set_result(self.result())
        return fut


    def _is_gloo(self):
        return self._cpu or (bool(self._parts) and all(p._is_gloo() for p in self._parts))

    def _gloo_observed(self, me):
        """The host has seen the gloo work complete: its host watch ends (the parts' of a coalesced work, and a
        gloo barrier's flushes, too)."""
        for p in self._parts:
            p._gloo_observed(me)
        self._gloo_done(me)
        for w in self._flushes:
            w._gloo_done(me)
        self._flushes = ()

    def _gloo_future(self, me):
        """ProcessGroupGloo's future (createFutureAsOutput): a CPU future (no devices) of the outputs, completed by
        the worker thread when the work is done. simdist's worker ran at once, so the future is complete, but the
        host knows the work is done only once it observes the future: wait(), value(), a True done(), inside a
        then() / add_done_callback() callback, torch.futures.wait_all / collect_all (_GlooFuture). A future taken
        inside a backward pass is torch DDP's C++ Reducer's (or a comm hook's that the Reducer calls): the Reducer
        waits it in C++ (finalize_backward), where simdist cannot see it, so that watch ends here, at once."""
        fut = _GlooFuture(self)
        fut.set_result(self.result())
        if me.backward_depth or not _gloo_ops(self):
            self._gloo_observed(me)
        return fut


class _GlooFuture(torch.futures.Future):
    """The future of an async gloo collective (SimWork._gloo_future): each way the host can learn that the work
    is done ends the work's host watch; a callback runs as the worker would run it, after the work, but the host
    that registered it is not thereby ordered after the work (the callback may run later, on the worker thread)."""

    def __init__(self, work):
        super().__init__()
        self._simdist_work = work

    def _observed(self):
        me = current_rank()
        if me is not None and not getattr(me, "gloo_callbacks", 0):  # (in a callback: its own fut.value())
            self._simdist_work._gloo_observed(me)

    def wait(self):
        v = super().wait()
        self._observed()
        return v

    def value(self):
        v = super().value()
        self._observed()
        return v

    def done(self):
        d = super().done()
        if d:
            self._observed()
        return d

    def _ordered(self, callback):
        """callback, run with the host's clock joined with the work's (undone after it: see the class)."""
        work = self._simdist_work

        def run(fut):
            me = current_rank()
            ops = _gloo_ops(work)
            if me is None or not ops:
                return callback(fut)
            host = me.host
            before = {op.stream.id: host.vc.get(op.stream.id) for op in ops}
            host.join_clock({op.stream.id: op.seq for op in ops})
            me.gloo_callbacks = getattr(me, "gloo_callbacks", 0) + 1
            try:
                return callback(fut)
            finally:
                me.gloo_callbacks -= 1
                if _gloo_ops(work):  # the host is not ordered after the work by registering a callback
                    vc = {k: v for k, v in host.vc.items() if k not in before}
                    vc.update({k: v for k, v in before.items() if v is not None})
                    host.vc = vc
                    for op in ops:  # (the callback's ordered accesses ended the checks' entries: renewed)
                        _watch(me, op)
        return run

    def then(self, callback):
        child = _GlooFuture(self._simdist_work)
        cb = self._ordered(callback)

        def chain(fut):
            try:
                child.set_result(cb(fut))
            except Exception as e:  # noqa: BLE001 - as ivalue::Future::then: the child future holds the error
                child.set_exception(e)
        super().add_done_callback(chain)
        return child

    def add_done_callback(self, callback):
        super().add_done_callback(self._ordered(callback))


def _gloo_ops(work):
    ops = [work._gloo] if work._gloo is not None else []
    for p in work._parts:
        ops += _gloo_ops(p)
    return ops


_orig_wait_all = torch.futures.wait_all
_orig_collect_all = torch.futures.collect_all


def _wait_all(futures):
    """torch.futures.wait_all: the host waits every future (the list C++ gives back holds new wrappers, not
    simdist's, so their wait() is not seen: the gloo futures among them are observed here)."""
    out = _orig_wait_all(futures)
    for f in futures:
        if isinstance(f, _GlooFuture):
            f._observed()
    return out


def _collect_all(futures):
    """torch.futures.collect_all: a future complete once all are; observing it observes each gloo future."""
    gloo = [f for f in futures if isinstance(f, _GlooFuture)]
    fut = _orig_collect_all(futures)
    if not gloo:
        return fut
    out = _GlooFuture(_Observers(gloo))
    fut.add_done_callback(lambda f: out.set_result(f.value()))
    return out


class _Observers:
    """The work-like handle of a collect_all future: observing it observes each of its gloo futures."""
    _gloo = None

    def __init__(self, futures):
        self._futures = futures
        self._parts = [f._simdist_work for f in futures]

    def _gloo_observed(self, me):
        for f in self._futures:
            f._simdist_work._gloo_observed(me)


class _GlooStream:
    """The worker thread of a gloo process group, as the host-memory checks see an op's stream."""
    __slots__ = ("id", "name", "dev")

    def __init__(self, me, n):
        self.id = -n  # never a simulated CUDA stream's id (those count up from 1)
        self.name = f"rank{me.rank}/gloo"
        self.dev = types.SimpleNamespace(rank=me.rank, index="cpu (gloo)")


class _GlooOp:
    """An async gloo collective until the host waits for it: ProcessGroupGloo runs it on a worker thread, which
    reads its input tensors and writes its outputs some time before wait() returns (distributed.rst: wait() "will
    block the process until the operation is finished" for CPU collectives). simdist computed it at the call (one
    schedule a worker can take), so `done`: the values are not damaged, the race is reported."""
    __slots__ = ("stream", "name", "frames", "seq", "done", "vc", "watch")

    def __init__(self, me, desc):
        me.gloo_works = n = getattr(me, "gloo_works", 0) + 1
        self.stream = _GlooStream(me, n)
        self.name = f"gloo:{desc}"
        self.frames = capture_frames(20, 3)
        self.seq = 1
        self.done = True
        self.vc = {self.stream.id: 1}


def _gloo_pending(me, desc, reads, outputs):
    """Register an async gloo collective's CPU tensors with the host-memory checks (faces/host_memory.py): a host
    write of an input, or a host access of an output, before the host waits for the work races the worker."""
    op = _GlooOp(me, desc)
    op.watch = (list(reads), list(outputs))
    _watch(me, op)
    return op


def _watch(me, op):
    hm = me.host_memory
    reads, outputs = op.watch
    for t in reads:
        hm.pending_source(op, t)
    for t in outputs:
        hm.pending(op, t)


def _blocking_wait_env():
    """TORCH_NCCL_BLOCKING_WAIT (or the deprecated NCCL_BLOCKING_WAIT), read as ProcessGroupNCCL's constructor
    reads it (`blockingWait_ = getCvarBool(TORCH_NCCL_BLOCKING_WAIT, false)`; c10d/Utils.hpp getCvarBool: y, yes,
    1, t, true / n, no, 0, f, false, any case; another value is an error). Documented at
    https://pytorch.org/docs/stable/distributed.html (environment variables): with it, wait() blocks the host."""
    ret = False
    # getCvarBool parses the names in reverse order (the deprecated name first, so the current one wins), lowers
    # each value without stripping it, and stops at the first invalid one
    for name in ("NCCL_BLOCKING_WAIT", "TORCH_NCCL_BLOCKING_WAIT"):
        val = os.environ.get(name)
        if val is None:
            continue
        v = val.lower()
        if v in ("y", "yes", "1", "t", "true"):
            ret = True
        elif v in ("n", "no", "0", "f", "false"):
            ret = False
        else:
            raise RuntimeError(f"Invalid value for environment variable: {name}")
    return ret


def _gives_timeout(timeout):
    """Whether Work.wait(timeout) was given a timeout (kNoTimeout is 0 ms; Python passes a timedelta)."""
    if timeout is None:
        return False
    if hasattr(timeout, "total_seconds"):
        return timeout.total_seconds() != 0
    return float(timeout) != 0


class _InFlight:
    """The tensors async collectives hold (ProcessGroupNCCL stashes them in the Work and its watchdog keeps the
    Work until the collective completes), released at wait() or once the host sees the collective done."""

    def __init__(self):
        self.entries = []  # [marker, tensors]

    def add(self, marker, tensors):
        entry = [marker, tensors]
        self.entries.append(entry)
        return entry

    def release(self, entry):
        entry[1] = None

    def prune(self, me):
        keep = []
        for entry in self.entries:
            m, ts = entry
            if ts is None:
                continue
            if m.end is not None and m.end <= me.host.clock:
                me.host.join_op(m)  # the watchdog saw the end event complete
                entry[1] = None
                continue
            keep.append(entry)
        self.entries = keep


class RankC10d:
    """One simulated rank's torch.distributed state: c10d's registry (`_world`), the tensors its async
    collectives hold, the batch_isend_irecv in progress, whether its default group is made at first use."""

    def __init__(self):
        self.world = _RankWorld()
        self.in_flight = _InFlight()
        self.batch = _Batch()
        self.auto_init = False
        self.works = {}  # id(allocation) -> [Work]: functional collectives' outputs not waited yet
        self.subworld_stores = []  # the stores sub-world rendezvous gave (_rendezvous), kept alive
        self.premul_factors = {}  # id(ReduceOp) -> (the op, kept alive; its factor), where the op has no .factor


def state(me):
    """The rank's RankC10d (made by the torch face when the rank starts: simdist/faces/patches.py)."""
    return me.face.c10d


def _in_flight(me):
    return state(me).in_flight


# --- the process group ---------------------------------------------------------------------------
class _Options:
    """ProcessGroupNCCL.Options / ProcessGroupGloo's options: what c10d sets on them."""

    def __init__(self, is_high_priority_stream=False, *args, **kwargs):
        self.is_high_priority_stream = bool(is_high_priority_stream)  # ProcessGroupNCCL.Options(is_high_priority_stream=)
        self._timeout = None
        self.global_ranks_in_group = []
        self.group_name = ""
        self.split_from = None
        self.split_color = 0
        self.config = types.SimpleNamespace()  # the ncclConfig_t fields (cga_cluster_size, max_ctas, ...): kept, unused

    def __getattr__(self, name):
        raise AttributeError(f"simdist's process group options have no {name!r}")


class SimProcessGroup(dist.ProcessGroup):
    """One rank's simulated NCCL (and gloo) process group."""

    Options = _Options
    supports_coalescing = True
    supports_splitting = True  # ProcessGroupNCCL does (ncclCommSplit): torch.distributed.split_group needs it
    supports_time_estimate = False

    def __init__(self, store, rank, size, options=None, timeout=None):
        super().__init__(rank, size)
        self.options = options if isinstance(options, _Options) else _Options()
        self._store = store
        self._group = None
        self._coalesced = None  # works of the open _start_coalescing block
        self._backends = None
        self._used_devices = set()  # ProcessGroupNCCL's usedDeviceIdxs_: devices its communicators were made on
        self._blocking_wait = _blocking_wait_env()  # ProcessGroupNCCL's blockingWait_, read at its construction
        me = current_rank()
        if me is not None and me.face is not None:
            # the program makes its own groups: a default group it later destroys is not made again at first use
            # (after destroy_process_group torch raises "Default process group has not been initialized")
            state(me).auto_init = False

    # --- what c10d asks of a backend -------------------------------------------------------------
    def _set_sequence_number_for_group(self):
        pass

    def _get_sequence_number_for_group(self):
        return self._engine_group().calls

    def _get_backend(self, device):
        return self

    def _get_backend_name(self):
        return self.name()

    def name(self):
        return "nccl" if "nccl" in self._config().values() else "gloo"

    def getBackendName(self):
        # (what C++ callers read; inside torch DDP's Logger.set_construction_data_and_log see _DDPLogger)
        name = self.name()
        return name + _DDP_LOGGER_MARK if getattr(_ddp_logging, "active", False) and name == "gloo" else name

    @property
    def group_name(self):
        return c10d._world.pg_names.get(self, self.options.group_name or "")

    @property
    def _device_types(self):
        return [torch.device(d) for d in self._config()]

    def split_group(self, ranks, timeout=None, opts=None, group_name=None, group_desc=None, device_types=None):
        """ProcessGroup::splitGroup as torch.distributed.split_group calls it: this rank's group of `ranks` (group
        ranks of this group, sorted), or None when this rank is not in it (ProcessGroupNCCL makes it with
        ncclCommSplit, where non-members pass NCCL_SPLIT_NOCOLOR). Its communicator is made at its first
        collective, like any other group's here; c10d registers the group in _world."""
        ranks = sorted(int(r) for r in ranks)
        if self.rank() not in ranks:
            return None
        parent = self._engine_group().ranks  # global ranks in group-rank order
        pg = type(self)(self._store, ranks.index(self.rank()), len(ranks), copy.copy(opts) if opts is not None
                        else None)
        pg.options.group_name = group_name or ""
        pg.options.global_ranks_in_group = [parent[r] for r in ranks]
        if group_desc:
            pg._set_group_desc(group_desc)
        pg._backends = dict(self._config())
        return pg

    def get_group_store(self):
        return self._store

    def eager_connect_single_device(self, device):
        pass

    def perform_nocolor_split(self, device):
        pass

    def comm_split_count(self):
        return 0

    def _set_default_timeout(self, timeout):
        pass

    def _add_ephemeral_timeout(self, timeout):
        pass

    def abort(self):
        pass

    def shutdown(self):
        pass

    def __repr__(self):
        try:
            return f"<simdist ProcessGroup {self.group_name} ranks={self._engine_group().ranks}>"
        except Exception:  # noqa: BLE001 - not registered yet
            return "<simdist ProcessGroup>"

    # --- the group as the engine sees it ----------------------------------------------------------
    def _config(self):
        if self._backends is None:
            cfg = c10d._world.pg_backend_config.get(self)
            if cfg is None:
                return {"cuda": "nccl"}
            out = {}
            for part in str(cfg).split(","):
                dev, _, be = part.partition(":")
                out[dev.strip()] = be.strip()
            self._backends = out
        return self._backends

    def _engine_group(self):
        g = self._group
        if g is None:
            ranks_map = c10d._world.pg_group_ranks.get(self)
            name = self.group_name or "pg"
            if self._made_by_program():
                ranks = engine.subworld_members(
                    _rank(), name, self.rank(), self.size(),
                    f"the members of process group {name!r} ({self.size()} ranks, made by the program over a store "
                    f"of its own, as group rank {self.rank()})")
            elif ranks_map:
                ranks = [r for r, _ in sorted(ranks_map.items(), key=lambda kv: kv[1])]
            else:
                ranks = list(self.options.global_ranks_in_group) or list(range(self.size()))
            desc = getattr(self, "group_desc", None) or name
            g = self._group = _rank().collectives.group_for(name, ranks, desc if desc != "undefined" else name)
        return g

    def _made_by_program(self):
        """Whether this is a group the program made with c10d's `_new_process_group_helper(n, rank, [], ...)` over
        a rendezvous of its own after init_process_group (OpenRLHF's `init_process_group` copy, SGLang's
        `init_custom_process_group`: a second "default" group of the trainer's rank 0 and the inference workers).
        Its ranks number themselves and the program's `pg_group_ranks` entry is `{i: i}`, which on a GPU no
        collective reads (NCCL learns its peers from the store); so the members are learnt as NCCL learns them.
        Whatever store it was made over (a sub-world rendezvous' or a TCPStore the program made): c10d's own
        groups after init_process_group (new_group, split_group, DeviceMesh) name their global ranks."""
        default = c10d._world.default_pg
        return default is not None and self is not default and not self.options.global_ranks_in_group

    # --- the one path of every collective -------------------------------------------------------
    def _run(self, kind, desc, sig, inputs, outputs, compute, async_op, reads=None, writes=None, nbytes=None,
             stream_key=None, meta=None, host_blocking=False, group=None, result=None, post=None):
        """result: the Work's outputs when they are not `outputs` (a list all_gather's: its flat buffer).
        post(stream): post-processing launched on the collective's stream before its end event; returns more
        tensors the work uses (record_stream-ed or stashed with its own)."""
        me = _rank()
        g = group if group is not None else self._engine_group()
        tensors = list(inputs) + list(outputs)
        reads = list(reads if reads is not None else inputs)
        writes = list(writes if writes is not None else outputs)
        nb = nbytes if nbytes is not None else sum(t.numel() * t.element_size() for t in inputs)
        if meta is None:
            compute = _ignore_metas(compute)
        n_cpu = sum(1 for t in tensors if not isinstance(t, SimTensor))
        cfg = self._config()
        if n_cpu:
            if n_cpu != len(tensors):
                raise ValueError(f"{kind}: CPU and CUDA tensors mixed in one collective")
            if cfg.get("cpu") != "gloo":
                raise RuntimeError(f"No backend type associated with device type cpu (group {g.name} has backend "
                                   f"config {c10d._world.pg_backend_config.get(self)!r}; a CPU tensor needs gloo, "
                                   "e.g. init_process_group('cpu:gloo,cuda:nccl'))")
            engine.host_collective(me, g, kind, desc, sig, reads, outputs, compute, nb)
            work = SimWork(me, None, None, outputs, what=desc)
            work._cpu = True
            if async_op:
                work._gloo = _gloo_pending(me, desc, reads, outputs)
                self._async_gloo = [w for w in getattr(self, "_async_gloo", ()) if w._gloo is not None] + [work]
            return work
        if cfg.get("cuda") != "nccl":
            raise UnsupportedOperation(f"{kind} of CUDA tensors on a gloo process group (gloo stages device tensors "
                                       "through host memory): not modelled by simdist; use NCCL for CUDA tensors")
        world = me.world
        bound = getattr(self, "bound_device_id", None)
        if bound is not None and bound.index is not None:
            other = next((t._dev.index for t in tensors if t._dev.index != bound.index), None)
            if other is not None:  # ProcessGroupNCCL getNCCLComm / initNCCLComm
                raise DistBackendError(
                    f"Attempt to perform collective on tensor not on device passed to init_process_group ({kind} "
                    f"of a tensor on cuda:{other}; the group {g.name} is bound to cuda:{bound.index}, 'Tensor found "
                    f"on device cuda:{other} but backend constrained to cuda:{bound.index}')")
        self._used_devices.update(t._dev.index for t in tensors)
        default = c10d._world.default_pg
        if default is not None and getattr(default, "bound_device_id", None) is not None:
            me.collectives.eager_init = True  # init_process_group(device_id=...): communicators made eagerly
        in_flight = _in_flight(me)
        in_flight.prune(me)
        reads = [_region(t) for t in reads]
        writes = [_region(t) for t in writes]
        try:
            op, stream, cur, on_side = engine.launch_collective(me, g, kind, desc, sig, reads, writes, compute,
                                                                async_op, nb, stream_key, meta)
        except NcclError as e:
            if isinstance(e, dist.DistBackendError):
                raise
            raise DistBackendError(str(e)) from None
        if post is not None:
            tensors += post(stream)
        host = me.host
        stash = None
        if on_side:
            if world.nccl_profile == "2.7" and not world.avoid_record_streams:
                for t in tensors:
                    t._alloc.record_stream(stream)
            else:
                stash = tensors
        blocking = self._blocking_wait
        marker = stream.record_marker(host) if (on_side or async_op or blocking) else None
        if stash is not None:
            stash = in_flight.add(marker, stash)
        end = marker
        if world.nccl_profile == "2.7" and not async_op:
            cur.wait_marker(host, marker)  # ProcessGroupNCCL <= 2.7: a synchronous op's current stream waits
            marker = None
        work = SimWork(me, marker, stash, outputs if result is None else result, host_blocking, desc)
        if blocking:
            # the work's opTimeout_: the group's timeout (c10d sets the options' _timeout), else NCCL's 10 minutes
            work._blocking = (end, self.options._timeout or datetime.timedelta(minutes=10))
        if self._coalesced is not None:
            self._coalesced.append(work)
        return work

    # --- collectives ------------------------------------------------------------------------------
    def allreduce(self, tensors, opts=None):
        me = _rank()
        ts = [_check(me, t, "all_reduce") for t in _as_list(tensors)]
        op = getattr(opts, "reduceOp", None)
        return self._allreduce(ts, op, _async(opts))

    def _allreduce(self, ts, op, async_op):
        name = _redop_name(op, ts[0])
        desc = _desc("all_reduce", ts, name)
        nt = len(ts)  # (compute closures hold no tensor: they live until the collective has run)
        sig = ("all_reduce", tuple(_sig_t(t) for t in ts), name)
        if not isinstance(ts[0], SimTensor):
            return self._run("all_reduce", desc, sig, ts, ts, lambda vals: [_gloo_allreduce(vals, name)] * len(vals),
                             async_op)
        return self._run("all_reduce", desc, sig, ts, ts,
                         lambda vals: [[engine.reduce_values([v[k] for v in vals], name) for k in range(nt)]]
                         * len(vals), async_op)

    def allreduce_coalesced(self, tensors, opts=None):
        me = _rank()
        ts = [_check(me, t, "all_reduce_coalesced") for t in tensors]
        if not isinstance(ts[0], SimTensor) and len({t.dtype for t in ts}) > 1:  # (one flat buffer: one dtype)
            raise RuntimeError("ProcessGroupGloo::allreduce_coalesced: tensors must all have the same type")
        return self._allreduce(ts, getattr(opts, "reduceOp", None), _async(opts))

    def broadcast(self, tensors, opts=None):
        me = _rank()
        ts = [_check(me, t, "broadcast") for t in _as_list(tensors)]
        g = self._engine_group()
        root = _root(opts, g, "broadcast")
        is_root = g.index[me.rank] == root
        nt = len(ts)
        return self._run(
            "broadcast", _desc("broadcast", ts, f"src={g.ranks[root]}"),
            ("broadcast", tuple(_sig_t(t) for t in ts), root), ts, ts,
            lambda vals: [vals[root] if j != root else [None] * nt for j in range(len(vals))], _async(opts),
            reads=ts if is_root else [], writes=[] if is_root else ts,
            nbytes=sum(t.numel() * t.element_size() for t in ts))

    def reduce(self, tensors, opts=None):
        me = _rank()
        ts = [_check(me, t, "reduce") for t in _as_list(tensors)]
        t = ts[0]
        g = self._engine_group()
        root = _root(opts, g, "reduce")
        name = _redop_name(getattr(opts, "reduceOp", None), t)
        is_root = g.index[me.rank] == root
        if not isinstance(t, SimTensor):
            # gloo (ProcessGroupGloo AsyncReduceWork): gloo::reduce with the tensor as input and output, a ring
            # that leaves partial reductions in the other ranks' buffers and reduces the root's in its own order
            return self._run(
                "reduce", _desc("reduce", [t], f"dst={g.ranks[root]}, {name}"), ("reduce", _sig_t(t), root, name),
                [t], [t], lambda vals: [[v] for v in engine.gloo_reduce_values([v[0] for v in vals], root, name)],
                _async(opts))
        # NCCL (ProcessGroupNCCL::reduce): ncclReduce(tensor, tensor, ..., root), whose recvbuff "may be NULL on
        # all calls except for root": only the root's buffer is written
        return self._run(
            "reduce", _desc("reduce", [t], f"dst={g.ranks[root]}, {name}"), ("reduce", _sig_t(t), root, name), [t],
            [t], lambda vals: [[engine.reduce_values([v[0] for v in vals], name)] if j == root else [None]
                               for j in range(len(vals))], _async(opts), writes=[t] if is_root else [])

    def _allgather_into(self, out, inp, async_op, what="all_gather_into_tensor"):
        me = _rank()
        o = _check(me, out, what)
        i = _check(me, inp, what)
        n = self._engine_group().size()
        if o.dtype != i.dtype:
            raise TypeError("output tensor must have the same type as input tensor")
        if o.numel() != n * i.numel():
            raise ValueError("output tensor size must be equal to world_size times input tensor size")
        return self._run("all_gather", _desc(what, [o, i]), ("all_gather_into_tensor", _sig_t(i)), [i], [o],
                         lambda vals: [[torch.cat([v[0].reshape(-1) for v in vals])]] * n, async_op,
                         nbytes=o.numel() * o.element_size())

    def _allgather_base(self, output, input, opts=None):
        return self._allgather_into(output, input, _async(opts))

    def all_gather_single(self, output, input, opts=None):
        return self._allgather_into(output, input, _async(opts), "all_gather_single")

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        return self._coalesce([self._allgather_into(o, i, _async(opts), "all_gather_into_tensor_coalesced")
                               for o, i in zip(outputs, inputs)])

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        return self.allgather_into_tensor_coalesced(outputs, inputs, opts)

    def allgather(self, output_lists, inputs, opts=None):
        me = _rank()
        if len(inputs) != 1 or len(output_lists) != 1:
            raise UnsupportedOperation("all_gather with several tensors per rank (one per device) is not modelled")
        t = _check(me, inputs[0], "all_gather")
        outs = [_check(me, x, "all_gather", p2p=True) for x in output_lists[0]]
        g = self._engine_group()
        n = g.size()
        if len(outs) != n:
            raise ValueError(f"all_gather: tensor_list has {len(outs)} tensors, group {g.name} has {n} ranks")
        for x in outs:
            if x.dtype != t.dtype:
                raise TypeError("Tensors must have identical type")
        if outs[g.index[me.rank]].numel() != t.numel():
            raise ValueError(f"all_gather: this rank's output slot {list(outs[g.index[me.rank]].shape)} does not "
                             f"match its input {list(t.shape)}")
        # outputs of different sizes are allowed (ProcessGroupNCCL then broadcasts each rank's input in turn): the
        # signature is the list of output shapes, which every rank must agree on
        sig = ("all_gather", tuple(_sig_t(x) for x in outs))
        nbytes = sum(x.numel() * x.element_size() for x in outs)
        if len({tuple(x.shape) for x in outs}) > 1 or not isinstance(t, SimTensor):  # (gloo: its own path)
            _stage_noncontiguous(outs, "all_gather", "outputs", _async(opts))
            return self._run("all_gather", _desc("all_gather", [t]), sig, [t], outs,
                             lambda vals: [[v[0] for v in vals]] * n, _async(opts), nbytes=nbytes)
        return _flat_allgather(self, t, outs, n, sig, nbytes, _async(opts))

    def allgather_coalesced(self, output_lists, input_list, opts=None):
        return self._coalesce([self.allgather([outs], [inp], opts) for outs, inp in zip(output_lists, input_list)])

    def _reduce_scatter_tensor(self, out, inp, op, async_op, what="reduce_scatter_tensor"):
        me = _rank()
        o = _check(me, out, what)
        i = _check(me, inp, what)
        n = self._engine_group().size()
        if o.dtype != i.dtype:
            raise TypeError("input tensor must be the same type as the output tensor.")
        if i.numel() != n * o.numel():
            raise ValueError("input tensor must be the same size as output size times world size")
        name = _redop_name(op, i)
        gloo = not isinstance(i, SimTensor)

        def compute(vals):
            if gloo:
                # gloo (ProcessGroupGloo reduce_scatter_tensor_coalesced): an allreduce of the whole input, then
                # each rank keeps its chunk (measured, torch 2.13: the ring's sums over all n * m elements)
                full = engine.gloo_allreduce_values([v[0].reshape(-1) for v in vals], name).reshape(n, -1)
                return [[full[j]] for j in range(n)]
            flat = [v[0].reshape(n, -1) for v in vals]
            return [[engine.reduce_values([f[j] for f in flat], name)] for j in range(n)]
        return self._run("reduce_scatter", _desc(what, [o, i], name), ("reduce_scatter_tensor", _sig_t(i), name), [i],
                         [o], compute, async_op, nbytes=i.numel() * i.element_size())

    def _reduce_scatter_base(self, output, input, opts=None):
        return self._reduce_scatter_tensor(output, input, getattr(opts, "reduceOp", None), _async(opts))

    def reduce_scatter_single(self, output, input, opts=None):
        return self._reduce_scatter_tensor(output, input, getattr(opts, "reduceOp", None), _async(opts),
                                           "reduce_scatter_single")

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        op = getattr(opts, "reduceOp", None)
        return self._coalesce([self._reduce_scatter_tensor(o, i, op, _async(opts), "reduce_scatter_tensor_coalesced")
                               for o, i in zip(outputs, inputs)])

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        return self.reduce_scatter_tensor_coalesced(outputs, inputs, opts)

    def reduce_scatter(self, outputs, input_lists, opts=None):
        me = _rank()
        if len(outputs) != 1 or len(input_lists) != 1:
            raise UnsupportedOperation("reduce_scatter with several tensors per rank is not modelled")
        o = _check(me, outputs[0], "reduce_scatter")
        ins = [_check(me, x, "reduce_scatter", p2p=True) for x in input_lists[0]]
        staged = _stage_noncontiguous(ins, "reduce_scatter", "inputs", _async(opts))
        if staged is not None:  # ProcessGroupNCCL copies the inputs into a flat buffer first
            for x, tmp in zip(ins, staged):
                if x is not tmp:
                    tmp.copy_(x)
            return self.reduce_scatter(outputs, [staged], opts)
        g = self._engine_group()
        n = g.size()
        if len(ins) != n:
            raise ValueError(f"reduce_scatter: input_list has {len(ins)} tensors for {n} ranks")
        name = _redop_name(getattr(opts, "reduceOp", None), o)
        mine = ins[g.index[me.rank]]
        if mine.numel() != o.numel():  # RuntimeError, as the H200 raised it (a copy_ of the slot into the output)
            raise RuntimeError(f"The size of tensor a ({o.numel()}) must match the size of tensor b ({mine.numel()}) "
                               "at non-singleton dimension 0")
        return self._run(  # inputs of different sizes are allowed (a coalesced group of reduces in NCCL)
            "reduce_scatter", _desc("reduce_scatter", [o], name),
            ("reduce_scatter", tuple(_sig_t(x) for x in ins), name), ins, [o],
            (lambda vals: [[engine.reduce_values([v[j] for v in vals], name)] for j in range(n)])
            if isinstance(o, SimTensor) else  # gloo: one ring allreduce per slot (measured, torch 2.13)
            (lambda vals: [[engine.gloo_allreduce_values([v[j] for v in vals], name)] for j in range(n)]),
            _async(opts))

    def _alltoall_single(self, output, input, output_split_sizes, input_split_sizes, async_op):
        me = _rank()
        o = _check(me, output, "all_to_all_single")
        i = _check(me, input, "all_to_all_single")
        if not (o.is_contiguous() and i.is_contiguous()):
            raise UnsupportedOperation("all_to_all_single of tensors that are not row-major contiguous is not "
                                       "modelled by simdist")
        g = self._engine_group()
        n = g.size()
        # the C++ signature takes std::vector<int64_t>: any sequence of integers converts (Megatron's alltoall
        # token dispatcher passes numpy arrays: token_dispatcher.py `.numpy()` of the per-rank token counts);
        # then c10d::checkSplitSizes (torch/csrc/distributed/c10d/Utils.hpp) checks each against its tensor
        input_split_sizes = _split_sizes(input_split_sizes, i, n)
        output_split_sizes = _split_sizes(output_split_sizes, o, n)
        splits = (list(input_split_sizes), list(output_split_sizes))

        def compute(vals, metas):  # metas: every rank's (input splits, output splits)
            chunks = [list(torch.split(vals[j][0], metas[j][0])) for j in range(n)]
            out = []
            for j in range(n):
                for k in range(n):
                    if chunks[k][j].shape[0] != metas[j][1][k]:
                        raise SimulationError(f"all_to_all_single: rank {g.ranks[k]} sends {chunks[k][j].shape[0]} "
                                              f"rows to rank {g.ranks[j]}, which expects {metas[j][1][k]}")
                out.append([torch.cat([chunks[k][j] for k in range(n)])])
            return out
        return self._run("all_to_all", _desc("all_to_all_single", [o, i]), ("all_to_all_single", str(i.dtype)), [i],
                         [o], compute, async_op, meta=splits)

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        return self._alltoall_single(output, input, output_split_sizes, input_split_sizes, _async(opts))

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        return self._alltoall_single(output, input, output_split_sizes, input_split_sizes, _async(opts))

    def alltoall(self, outputs, inputs, opts=None):
        me = _rank()
        outs = [_check(me, x, "all_to_all") for x in outputs]
        ins = [_check(me, x, "all_to_all") for x in inputs]
        g = self._engine_group()
        n = g.size()
        if len(ins) != n or len(outs) != n:
            # ProcessGroupNCCL::alltoall / torch::cuda::nccl::all2all index one tensor per rank without a check:
            # another length reads past the list or leaves outputs unwritten on a GPU (undefined)
            raise UnsupportedOperation(
                f"all_to_all with {len(ins)} input and {len(outs)} output tensors in a group of {n} ranks is not "
                "modelled by simdist: NCCL's all2all takes exactly one tensor per rank each way (torch does not "
                "check, so on a GPU this is undefined)")
        # NCCL moves bytes: torch::cuda::nccl::all2all sends ins[j] (its numel, its datatype) to rank j and receives
        # outs[j] from it, so every pair must agree on dtype and element count (a rank's tensors share one dtype:
        # distributed_c10d.all_to_all checks it); a disagreement is a mismatch, never a conversion
        dts = {str(x.dtype) for x in ins + outs}
        sizes = ([x.numel() for x in ins], [x.numel() for x in outs])

        def compute(vals, metas):
            for j in range(n):
                for k in range(n):
                    if metas[k][0][j] != metas[j][1][k]:
                        raise CollectiveMismatch(
                            f"all_to_all on group {g.name}: rank {g.ranks[k]} sends {metas[k][0][j]} elements to rank "
                            f"{g.ranks[j]}, which receives {metas[j][1][k]} from it (NCCL send/recv counts must "
                            "match)")
            return [[vals[k][j] for k in range(n)] for j in range(n)]
        return self._run("all_to_all", _desc("all_to_all", ins), ("all_to_all", len(ins), tuple(sorted(dts))), ins,
                         outs, compute, _async(opts), meta=sizes)

    def gather(self, output_lists, inputs, opts=None):
        me = _rank()
        t = _check(me, inputs[0], "gather")
        g = self._engine_group()
        root = _root(opts, g, "gather")
        n = g.size()
        is_root = g.index[me.rank] == root
        outs = [_check(me, x, "gather") for x in (output_lists[0] if output_lists else [])] if is_root else []
        if is_root and len(outs) != n:
            raise ValueError(f"gather: the destination needs a gather_list of {n} tensors")
        _assert_type_and_sizes_match("gather", outs, t)
        return self._run("gather", _desc("gather", [t], f"dst={g.ranks[root]}"), ("gather", _sig_t(t), root), [t],
                         outs, lambda vals: [[v[0] for v in vals] if j == root else [] for j in range(n)],
                         _async(opts))

    def scatter(self, outputs, input_lists, opts=None):
        me = _rank()
        t = _check(me, outputs[0], "scatter")
        g = self._engine_group()
        root = _root(opts, g, "scatter")
        n = g.size()
        is_root = g.index[me.rank] == root
        ins = [_check(me, x, "scatter") for x in (input_lists[0] if input_lists else [])] if is_root else []
        if is_root and len(ins) != n:
            raise ValueError(f"scatter: the source needs a scatter_list of {n} tensors")
        _assert_type_and_sizes_match("scatter", ins, t)
        return self._run("scatter", _desc("scatter", [t], f"src={g.ranks[root]}"), ("scatter", _sig_t(t), root), ins,
                         [t], lambda vals: [[vals[root][j]] for j in range(n)], _async(opts))

    def barrier(self, opts=None):
        """ProcessGroupNCCL's barrier: an all_reduce of one element, whose Work blocks the host when waited, on
        the device ProcessGroupNCCL::barrier picks: the first of `device_ids`, else the group's bound device
        (init_process_group(device_id=...)), else the first device a collective of this group used, else
        global rank % device count; never simply the current device."""
        me = _rank()
        ids = list(getattr(opts, "device_ids", None) or [])
        bound = getattr(self, "bound_device_id", None)
        if ids:
            idx = int(ids[0])
        elif bound is not None and bound.index is not None:
            idx = bound.index
        elif self._used_devices:
            idx = min(self._used_devices)  # usedDeviceIdxs_ is a std::set: *begin() is the smallest
        else:
            idx = me.rank % me.world.device_count
        dev = me.device(idx)
        cfg = self._config()
        if cfg.get("cuda") != "nccl":  # a gloo-only group: a host rendezvous
            g = self._engine_group()
            engine.host_collective(me, g, "barrier", "barrier()", ("barrier",), [], [],
                                   lambda vals, metas: [[]] * len(vals), 0)
            bw = SimWork(me, what="barrier()")
            # ProcessGroupGloo::barrier waits for every in-progress and queued work of the group before its own
            # (AsyncBarrierWork::run): once it is waited, the group's async gloo collectives are complete
            bw._flushes = [w for w in getattr(self, "_async_gloo", ()) if w._gloo is not None]
            self._async_gloo = []
            return bw
        with torch.cuda.device(dev.index):
            buf = torch.zeros(1, device="cuda")  # a kernel on the current stream, as ProcessGroupNCCL's barrier
        return self._run("all_reduce", "barrier()", ("barrier",), [buf], [buf],
                         lambda vals: [[engine.reduce_values([v[0] for v in vals], "SUM")]] * len(vals), True,
                         host_blocking=True)

    def monitored_barrier(self, timeout=None, wait_all_ranks=False):
        self.barrier().wait()

    # --- point to point ------------------------------------------------------------------------------
    def _p2p(self, tensors, peer, is_send):
        me = _rank()
        what = "send" if is_send else "recv"
        ts = _as_list(tensors)
        if len(ts) != 1:
            raise UnsupportedOperation(f"{what} of several tensors at once is not modelled")
        t = _check(me, ts[0], what, p2p=True)
        g = self._engine_group()
        if not 0 <= peer < g.size():
            raise ValueError(f"Invalid destination rank: should be within the range [0, {g.size() - 1}], but got "
                             f"{peer}")
        gpeer = g.ranks[peer]
        if gpeer == me.rank:
            raise ValueError(f"Invalid destination rank: rank {me.rank} cannot {what} to or from itself")
        src, dst = (me.rank, gpeer) if is_send else (gpeer, me.rank)
        pair = me.collectives.p2p_pair(g, src, dst)
        desc = f"{what}({t.dtype}{list(t.shape)}, {'dst' if is_send else 'src'}={gpeer})"
        si = pair.index[src]
        # a batch_isend_irecv, or any P2P inside a `_coalescing_manager(group, device)` block (_start_coalescing: one
        # ncclGroupStart/End around them, as batch_isend_irecv itself is built), is one NCCL group
        batched = _batch(me).take(t) or self._coalesced is not None
        # NCCL matches a send and its receive by element count and datatype only (ProcessGroupNCCL::send / recv
        # pass tensor.numel() and the NCCL datatype to ncclSend / ncclRecv; no shape travels): a 0-dim send into a
        # [1] receive, as pipelining's _get_init_p2p_neighbors_ops does, is one transfer
        return self._run("p2p", desc, ("p2p", t.numel(), str(t.dtype).replace("torch.", "")),
                         [t] if is_send else [], [] if is_send else [t],
                         lambda vals: [[None] if j == si else [vals[si][0]] for j in range(2)], True,
                         nbytes=t.numel() * t.element_size(), group=pair,
                         # a batch is one NCCL group: its sends and receives with one peer run together
                         stream_key=f"p2p:{min(src, dst)}-{max(src, dst)}" + ((":send" if is_send else ":recv")
                                                                              if batched else ""))

    def send(self, tensors, dstRank, tag=0):
        return self._p2p(tensors, int(dstRank), True)

    def recv(self, tensors, srcRank, tag=0):
        return self._p2p(tensors, int(srcRank), False)

    def recv_anysource(self, tensors, tag=0):
        raise UnsupportedOperation("recv from any source (src=None): NCCL has no receive from any source, and "
                                   "simdist does not model it")

    # --- coalescing ----------------------------------------------------------------------------------
    def _start_coalescing(self, device):
        if self._coalesced is not None:
            raise RuntimeError("a coalescing block is already open on this process group")
        self._coalesced = []

    def _end_coalescing(self, device):
        works, self._coalesced = self._coalesced or [], None
        return SimWork(_rank(), what="coalesced collectives", parts=works)

    def _coalesce(self, works):
        if len(works) == 1:
            return works[0]
        if self._coalesced is not None:  # the parts are already in the open block
            for w in works:
                self._coalesced.remove(w)
        w = SimWork(_rank(), what="coalesced collectives", parts=works)
        if self._coalesced is not None:
            self._coalesced.append(w)
        return w


def _gloo_allreduce(vals, name):
    """Every rank's tensors after ProcessGroupGloo's allreduce: one tensor reduced by gloo's ring
    (engine.gloo_allreduce_values); several (allreduce_coalesced) flattened into one buffer first and reduced as
    one (ProcessGroupGloo AsyncAllreduceCoalescedWork: flattenDenseTensors, allreduce, unflatten)."""
    if len(vals[0]) == 1:
        return [engine.gloo_allreduce_values([v[0] for v in vals], name)]
    flat = engine.gloo_allreduce_values([torch.cat([t.reshape(-1) for t in v]) for v in vals], name)
    out, at = [], 0
    for t in vals[0]:
        out.append(flat[at:at + t.numel()].reshape(t.shape))
        at += t.numel()
    return out


def _flat_allgather(pg, t, outs, n, sig, nbytes, async_op):
    """ProcessGroupNCCL::allgather with outputs of one size: ncclAllGather into outputFlattened = newLikeFlat(outputs)
    ([n, *shape], allocated before the collective on the caller's current stream), then, on the collective's
    stream (under a CUDAStreamGuard of it, before the work's end event), `outputTensors_[j].copy_(
    outputFlattened[j], true)`, which takes outputs of any layout. Those copies are the C++ backend's own kernels,
    launched inside the collective's call: here they are part of the collective's op (the buffer and every output
    written at its end, on its stream, before its end event), so that the op log numbers what a GPU job's hook
    of the Python calls numbers (ci/gpu_witness.py: one op per collective). The Work's outputs, so result() and
    its future's value, are [outputFlattened] (measured on an H200: one [world, *shape] tensor; torch's DDP
    quantization hooks index fut.wait()[0][rank]). Its lifetime is the Work's: freed into the current stream's
    pool when the Work goes (a synchronous all_gather: at its return). Per profile, as the collective's own
    tensors: 2.7 record_streams the outputs on the NCCL stream; 2.8+ async stashes them, a synchronous call runs
    it all on the current stream. The closure holds shapes, never the input tensor: holding it would delay its
    free past the gather (472f442 did, and so hid the TP=2 refit's reuse-after-free; notes L13)."""
    flat = torch.empty((n, *outs[0].shape), dtype=t.dtype, device=t.device)
    shape = tuple(outs[0].shape)
    # the collective writes dense bytes: a strided output gets a dense stand-in, copied into it by a copy_
    # kernel on the collective's stream before its end (these few copies are ops of their own)
    dense = [o if (o.is_contiguous() or _dense_format(o)) else torch.empty(o.shape, dtype=o.dtype, device=o.device)
             for o in outs]
    post = None
    if any(d is not o for d, o in zip(dense, outs)):
        def post(stream):
            with stream, torch.no_grad():  # (C++ copies below autograd: an output that requires grad is no leaf)
                for d, o in zip(dense, outs):
                    if d is not o:
                        o.copy_(d, non_blocking=True)
            return list(outs)

    def compute(vals):
        rows = torch.stack([v[0].reshape(shape) for v in vals])
        return [[rows, *rows.unbind(0)]] * n
    return pg._run("all_gather", _desc("all_gather", [t]), sig, [t], [flat, *dense], compute, async_op,
                   nbytes=nbytes, result=[flat], post=post)


def _stage_noncontiguous(ts, what, role, async_op):
    """The list forms of all_gather (outputs) and reduce_scatter (inputs) take tensors of any layout when they all
    have one size: ProcessGroupNCCL moves them through a flat buffer (newLikeFlat) with copy_ (allgather's
    post-processing copies `outputFlattened[j]` into each output; reduce_scatter's pre-processing copies each input
    into `inputFlattened[j]`), checking only the single tensor with check_gpu_single_tensor. A synchronous call is
    modelled with contiguous stand-ins and copy_ on the current stream (the stream the collective is ordered on
    for the caller); with async_op=True the copies would run on the NCCL stream: refused by name. Returns the
    stand-ins (the contiguous tensors themselves where they are), or None when every tensor is contiguous.
    (all_gather's outputs of one size go through _flat_allgather, its real buffer and copies; here only
    reduce_scatter's inputs, and the refusal of non-contiguous all_gather outputs of several sizes.)"""
    if all(t.is_contiguous() or _dense_format(t) for t in ts):
        return None
    if len({tuple(t.shape) for t in ts}) != 1:
        raise ValueError("Tensors must be contiguous")
    if async_op:
        raise UnsupportedOperation(f"{what}(async_op=True) with non-contiguous {role}: ProcessGroupNCCL copies them "
                                   "through a flat buffer on its NCCL stream; not modelled by simdist (a "
                                   "synchronous call, or contiguous tensors, are)")
    return [t if (t.is_contiguous() or _dense_format(t)) else torch.empty(t.shape, dtype=t.dtype, device=t.device)
            for t in ts]


def _assert_type_and_sizes_match(what, ts, ref):
    """ProcessGroupNCCL::gather / scatter on the root: assertTypeAndSizesMatch (c10d Utils.hpp) of every list
    tensor against the single tensor, raised through their invalidArgument (ValueError); measured on an H200."""
    for i, x in enumerate(ts):
        if x.dtype != ref.dtype:
            raise ValueError(f"ProcessGroupNCCL::{what}: invalid tensor type at index {i} (expected {ref.dtype}, got "
                             f"{x.dtype})")
        if tuple(x.shape) != tuple(ref.shape):
            raise ValueError(f"ProcessGroupNCCL::{what}: invalid tensor size at index {i} (expected "
                             f"({', '.join(map(str, ref.shape))}), got ({', '.join(map(str, x.shape))}))")


def _root(opts, g, what):
    """The root's group rank, checked as ProcessGroupNCCL checks it (assertRootRank: a ValueError)."""
    root = int(getattr(opts, "rootRank", 0))
    if what == "broadcast" and not 0 <= root < g.size():  # no assertRootRank there: ncclBroadcast refuses it
        raise DistBackendError(f"NCCL error in: /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp, invalid argument (broadcast from root {root} of "
                               f"a group of {g.size()} ranks; measured on an H200)")
    if not 0 <= root < g.size():
        raise ValueError(f"ProcessGroupNCCL::{what}: Invalid root rank: {root} (the group has {g.size()} ranks)")
    return root


def _as_list(tensors):
    return [tensors] if isinstance(tensors, torch.Tensor) else list(tensors)


def _async(opts):
    return bool(getattr(opts, "asyncOp", True)) if opts is not None else True


def _ignore_metas(compute):
    def with_metas(vals, metas):
        return compute(vals)
    return with_metas


class _Batch:
    """Tensors of the batch_isend_irecv call in progress (c10d checks the op list first, then issues each op)."""

    def __init__(self):
        self.tensors = []

    def take(self, t):
        for i, x in enumerate(self.tensors):
            if x is t:
                del self.tensors[i]
                return True
        return False


def _batch(me):
    return state(me).batch


_orig_check_p2p_op_list = c10d._check_p2p_op_list


def _check_p2p_op_list(p2p_op_list):
    _orig_check_p2p_op_list(p2p_op_list)
    me = current_rank()
    if me is not None:
        _batch(me).tensors = [p.tensor for p in p2p_op_list]


_DDP_LOGGER_MARK = " (simulated by simdist)"
_ddp_logging = threading.local()


class _DDPLogger(dist.Logger):
    """torch DDP's C++ Logger (`dist.Logger(reducer)`, torch/nn/parallel/distributed.py _ddp_init_helper) on a
    simulated group. Its set_construction_data_and_log, when the group's getBackendName() is "gloo", takes the
    group's GLOO backend and static_casts it to ProcessGroupGloo to read its thread count
    (torch/csrc/distributed/c10d/logger.cpp set_env_variables): a simulated group has no such backend, and the
    cast of anything else would read foreign memory. So the name it sees there is marked, and the logging data
    read back names the backend "gloo" with a ProcessGroupGloo's thread count: two, one device's worth
    (ProcessGroupGloo's Python constructor: `threads = devices.size() * 2`)."""

    def set_construction_data_and_log(self, *args, **kwargs):
        old, _ddp_logging.active = getattr(_ddp_logging, "active", False), True
        try:
            return super().set_construction_data_and_log(*args, **kwargs)
        finally:
            _ddp_logging.active = old

    def _get_ddp_logging_data(self):
        data = super()._get_ddp_logging_data()
        strs = data.strs_map  # (copies of the C++ maps: written back whole)
        name = strs.get("backend_name")
        if isinstance(name, str) and name.endswith(_DDP_LOGGER_MARK):
            strs["backend_name"] = name[:-len(_DDP_LOGGER_MARK)]
            data.strs_map = strs
            ints = data.ints_map
            ints["gloo_num_threads"] = 2
            data.ints_map = ints
        return data


class SimNCCL(SimProcessGroup):
    """What `ProcessGroupNCCL(store, rank, size, options)` makes inside a simulated rank."""


class SimGloo(SimProcessGroup):
    """What `ProcessGroupGloo(store, rank, size, timeout=...)` makes inside a simulated rank."""

    def __init__(self, store, rank, size, timeout=None, *args, **kwargs):
        super().__init__(store, rank, size, None, timeout)

    @staticmethod
    def create_device(hostname=None, interface=None, lazy_init=None):
        return None


# --- the per-rank c10d registry ------------------------------------------------------------------------
class _RankWorld:
    """c10d's `_World` state for one simulated rank (its default group, group maps, counters)."""

    def __init__(self):
        self.default_pg = None
        self.pg_map = {}
        self.pg_names = {}
        self.pg_group_ranks = {}
        self.pg_backend_config = {}
        self.group_count = 0
        self.tags_to_pg = {}
        self.pg_to_tag = {}
        self.pg_coalesce_state = {}
        self.comms = []

    @property
    def pg_config_info(self):
        return c10d._World.pg_config_info.fget(self)


_ORIG_WORLD = c10d._world


def _rank_world():
    me = current_rank()
    if me is None or me.face is None:
        if me is None and live_ranks():
            # a host thread the program started, while its ranks run: on a GPU it sees its process's
            # torch.distributed (c10d's registry is a module global), which here is a rank's; c10d's own, empty
            # one would make it run as if uninitialized (torch.distributed.checkpoint.async_save's writer thread
            # saved as a single process: state_dict_saver.py save, `no_dist = ... not dist.is_initialized()`)
            raise UnsupportedOperation(
                f"torch.distributed in a host thread the program started ({threading.current_thread().name}) is not "
                "modelled by simdist: its process groups and collectives run only in a rank's own thread (on a GPU "
                "the thread would see the process's torch.distributed; torch.distributed.checkpoint.async_save "
                "writes the checkpoint so, in its AsyncCheckpointExecutor thread: dcp.save, after staging with "
                "torch.distributed.checkpoint.staging.DefaultStager(StagingOptions(use_async_staging=False, ...)) "
                "if wanted, is modelled)")
        return _ORIG_WORLD
    return me.face.c10d.world


def _routed_property(name):
    orig = getattr(c10d._World, name)

    def fget(self):
        w = _rank_world()
        return orig.fget(self) if w is _ORIG_WORLD else getattr(w, name)

    def fset(self, value):
        w = _rank_world()
        if w is _ORIG_WORLD:
            orig.fset(self, value)
        else:
            setattr(w, name, value)
    return property(fget, fset if orig.fset is not None else None, doc=orig.__doc__)


class _RoutedWorld(c10d._World):
    """The class of c10d's own `_World` object while simdist runs. A program or library that bound the object
    before the run (`from torch.distributed.distributed_c10d import _world` at module level: OpenRLHF's
    openrlhf/utils/distributed_util.py, then `_world.pg_group_ranks[pg] = ...`) reaches the calling rank's
    registry through it, as c10d's own functions do through _WorldProxy; before, it wrote c10d's module-global
    maps, which every rank thread shares and no rank's c10d reads ("Group ... is not registered")."""


for _name in ("default_pg", "pg_map", "pg_names", "pg_group_ranks", "pg_backend_config", "group_count",
              "tags_to_pg", "pg_to_tag", "pg_coalesce_state", "comms", "pg_config_info"):
    if isinstance(getattr(c10d._World, _name, None), property):
        setattr(_RoutedWorld, _name, _routed_property(_name))


class _WorldProxy:
    """c10d._world while simdist runs: the calling rank's _RankWorld (outside a rank: c10d's own)."""

    def __getattr__(self, name):
        return getattr(_rank_world(), name)

    def __setattr__(self, name, value):
        setattr(_rank_world(), name, value)


def auto_init(me):
    """Let a function run by simdist.run use torch.distributed without init_process_group (the README's promise
    for functions; torchrun-style scripts get torch's own error instead)."""
    state(me).auto_init = True


_orig_get_default_group = c10d._get_default_group


def _get_default_group():
    me = current_rank()
    if me is not None and me.face is not None and me.face.c10d.auto_init and not c10d.is_initialized():
        me.face.c10d.auto_init = False
        c10d.init_process_group("nccl")
    return _orig_get_default_group()


_SUBWORLD_PREFIX = "simdist-subworld/"


class _SubworldStore(dist.PrefixStore):
    """The store a sub-world rendezvous gives: the world's program store under the rendezvous' own prefix."""


def _rendezvous(url, rank=-1, world_size=-1, **kwargs):
    """c10d's rendezvous inside a simulated rank: the world's program store (_program_store). Ranks never meet
    through it (collectives meet in simdist's engine), so nothing waits on it.

    After init_process_group, a rendezvous of another size or numbering is a second world the program makes for
    some of its ranks (OpenRLHF / SGLang / open-instruct weight-update groups: the trainer's rank 0 and the
    inference workers, `rank_offset + tp_rank`): its store is marked, and a process group made over it learns its
    members when it first needs its communicator (SimProcessGroup._made_by_program)."""
    me = _rank()
    n = me.world.world_size
    if (c10d._world.default_pg is not None and world_size not in (-1, None)
            and (world_size != n or rank not in (-1, None, me.rank))):
        if rank in (-1, None) or not 0 <= rank < world_size:
            raise ValueError(f"rendezvous({url!r}): rank {rank} of a world of {world_size}")
        if world_size > n:
            raise ValueError(f"rendezvous({url!r}, world_size={world_size}): the simulated world has only {n} ranks, "
                             "so the rendezvous would wait for ranks that never come")
        st = _SubworldStore(_SUBWORLD_PREFIX + f"{url}/", _program_store(me.world))
        # (kept alive: the program wraps it in PrefixStores and drops it, and a store reached again through
        # `underlying_store` is this Python object only while it lives)
        state(me).subworld_stores.append(st)
        yield (st, rank, world_size)
        return
    if world_size not in (-1, None) and world_size != n:
        raise ValueError(f"init_process_group(world_size={world_size}) but the simulated world has {n} ranks")
    if rank not in (-1, None) and rank != me.rank:
        raise ValueError(f"init_process_group(rank={rank}) called on simulated rank {me.rank}")
    yield (_program_store(me.world), me.rank, n)


def _program_store(world):
    """The store a rendezvous gives the program: one the world's ranks share, as every rank of a real job reaches
    the same TCPStore (a counter's `add` counts every rank, a key one rank sets the others read): the run's own
    store under a prefix of its own with rank processes (torch's TCPStore, as the ranks' messages use), one
    HashStore of the world with rank threads. (A store of each rank's own gave `add` 1 on every rank.) A `get` of a
    key no rank has set yet blocks the rank holding the turn, and the stall watch names it (L11)."""
    st = getattr(world, "program_store", None)
    if st is None:
        base = getattr(world.transport, "store", None)
        st = _C.PrefixStore(world.transport.prefix + "program/", base) if base is not None else _C.HashStore()
        world.program_store = st
    return st


def _rendezvous_helper(url, rank, world_size_opt, **kwargs):
    """torch.distributed.rendezvous's own helper, which every spelling reaches (`from torch.distributed import
    rendezvous` bound before the run, `torch.distributed.rendezvous.rendezvous`, c10d's, store-from-options):
    Megatron-Core's unit tests call `rendezvous("tcp://localhost:6000", rank, world_size)` and hand the store to
    init_process_group. A real TCPStore there would wait for peers while this rank holds the turn."""
    return _rendezvous(url, rank, -1 if world_size_opt is None else world_size_opt, **kwargs)


_orig_new_process_group_helper = c10d._new_process_group_helper


def _new_process_group_helper(*args, **kwargs):
    """c10d binds device_id to the ProcessGroup it made before a Python backend replaced it: bind it to ours."""
    pg, store = _orig_new_process_group_helper(*args, **kwargs)
    device_id = kwargs.get("device_id")
    if isinstance(pg, SimProcessGroup) and device_id is not None and pg.bound_device_id is None:
        pg.bound_device_id = device_id
    return pg, store


def _store_based_barrier(*args, **kwargs):
    """c10d's host barrier over the store after a group is made: simulated groups need none."""


def _is_nccl_available():
    return True


def _get_default_timeout(backend):
    """NCCL's default timeout (a CPU build of torch has no NCCL constant and warns)."""
    return c10d.default_pg_timeout


def _get_accelerator():
    """torch._C._get_accelerator() inside a rank: the machine's accelerator is CUDA (init_process_group() with no
    backend then makes NCCL, as on a GPU machine; FSDP2 and DeviceMesh pick "cuda")."""
    return torch.device("cuda")


def c10d_patches():
    """(owner, attribute, replacement) for the c10d objects simdist swaps during a run."""
    # (`import torch.distributed.rendezvous as rdzv` gives the function of that name: torch.distributed re-exports it)
    rdzv = importlib.import_module("torch.distributed.rendezvous")
    out = [
        (rdzv, "_rendezvous_helper", _rendezvous_helper),
        (c10d, "ProcessGroupNCCL", SimNCCL),
        (dist, "Logger", _DDPLogger),
        (c10d, "ProcessGroupGloo", SimGloo),
        (c10d, "is_nccl_available", _is_nccl_available),
        (dist, "is_nccl_available", _is_nccl_available),
        (c10d, "rendezvous", _rendezvous),
        (c10d, "_store_based_barrier", _store_based_barrier),
        (c10d, "_new_process_group_helper", _new_process_group_helper),
        (c10d, "_check_p2p_op_list", _check_p2p_op_list),
        (c10d, "_world", _WorldProxy()),
        (_ORIG_WORLD, "__class__", _RoutedWorld),  # the object itself, for those who bound it before the run
        (c10d, "_get_default_timeout", _get_default_timeout),
        (c10d, "_get_default_group", _get_default_group),
        (torch._C, "_get_accelerator", _get_accelerator),
        (torch.futures, "wait_all", _wait_all),
        (torch.futures, "collect_all", _collect_all),
    ]
    out.append((dist, "ProcessGroupNCCL", SimNCCL))  # a CUDA build has it (a CPU build, as here, does not)
    if _orig_make_premul is not None:
        out += [(m, "_make_nccl_premul_sum", _make_nccl_premul_sum) for m in (dist, c10d)
                if getattr(m, "_make_nccl_premul_sum", None) is _orig_make_premul]
    out.append((dist, "TCPStore", _RankTCPStore))
    out.append((dist, "ProcessGroupGloo", SimGloo))
    for name in ("_create_c10d_store",):
        if hasattr(rdzv, name):
            out.append((rdzv, name, _refused_store))
    out += _unmodelled_transports()
    return out


def _unmodelled_transports():
    """Cross-rank transports other than process groups, refused by name: on the CPU build they raised raw errors
    (symmetric memory: "SymmetricMemory MemPool did not find backend for device type cuda") or, for RPC, hung a
    minute on simdist's own turn key inside TensorPipe's device-map exchange before a DistStoreError."""
    out = []
    try:
        from torch.distributed import _symmetric_memory as symm
    except ImportError:  # (a torch without it)
        symm = None
    if symm is not None:
        why = ("symmetric memory (one buffer mapped into every rank's address space, read and written by peer "
               "kernels: torchtitan's async TP, vLLM's custom all-reduce) has no model of remote loads and stores")
        out += [(symm, n, _refused(f"torch.distributed._symmetric_memory.{n}", f"is not modelled by simdist: {why}"))
                for n in ("empty", "rendezvous", "enable_symm_mem_for_group", "get_symm_mem_workspace")
                if hasattr(symm, n)]
    rpc = getattr(dist, "rpc", None)
    if rpc is not None and hasattr(rpc, "init_rpc"):
        out.append((rpc, "init_rpc", _refused(
            "torch.distributed.rpc.init_rpc", "is not modelled by simdist: RPC (TensorPipe agents, remote references, distributed autograd) "
            "is a transport of its own beside the process groups; run the ranks' RPC code without simdist")))
    return out


_REAL_TCPSTORE = dist.TCPStore


class _ProgramTCPStore(dist.PrefixStore):
    """What a program's TCPStore is inside a simulated rank (_RankTCPStore): the world's program store under the
    store's address, so every rank that makes a TCPStore at one host:port reaches the same keys, as on a machine."""


class _TCPStoreMeta(type):
    def __call__(cls, host_name, port, world_size=None, is_master=False, timeout=datetime.timedelta(seconds=300),
                 wait_for_workers=True, multi_tenant=False, master_listen_fd=None, use_libuv=True):
        me = current_rank()
        if me is None or me.face is None:
            return _REAL_TCPSTORE(host_name, port, world_size, is_master, timeout, wait_for_workers, multi_tenant,
                                  master_listen_fd, use_libuv)
        st = _ProgramTCPStore(f"simdist-tcpstore/{host_name}:{int(port)}/", _program_store(me.world))
        st.set_timeout(timeout)
        st.host, st.port, st.libuvBackend = host_name, int(port), bool(use_libuv)
        state(me).subworld_stores.append(st)  # kept alive (see _rendezvous)
        return st

    def __instancecheck__(cls, obj):
        return isinstance(obj, (_REAL_TCPSTORE, _ProgramTCPStore))

    def __subclasscheck__(cls, sub):
        return issubclass(sub, (_REAL_TCPSTORE, _ProgramTCPStore))


class _RankTCPStore(metaclass=_TCPStoreMeta):
    """torch.distributed.TCPStore while simdist runs. Made by the program inside a simulated rank (vLLM's
    StatelessProcessGroup, hand-made weight-update groups: `TCPStore(host, port, n, is_master=rank == 0)`), a real
    store blocked the rank holding the turn: the master's constructor waits for its workers (wait_for_workers=True,
    the default) and a client's for its master's socket, and neither can come while that rank holds the turn, so
    the run hung until the store's timeout (300 s by default) and died with DistStoreError / DistNetworkError. It
    is now the world's program store under its address (_ProgramTCPStore): keys shared, nothing waits at
    construction. Not modelled: the master's wait for its workers (its host is not ordered after theirs), and a
    client whose master is never made (on a machine its connect times out; here it runs). Outside a rank (simdist's
    own launcher) it is the real TCPStore; isinstance checks accept both."""


def _refused_store(*args, **kwargs):
    raise UnsupportedOperation("a real c10d TCP store was requested inside a simulated rank (it would wait for "
                               "peers that never come): simdist gives init_process_group a store of its own")
