"""The per-op front door: every aten op on a simulated tensor lands here.

For each op: classify it once (view / in-place / functional / host-reading),
find where its outputs live (a meta-tensor shape inference, cached per
signature), allocate them from the simulated caching allocator, record the
accesses for happens-before, and queue the real CPU computation to run at the
op's virtual end time. Views run at once (they touch no bytes).
"""
from __future__ import annotations

import weakref
from functools import partial

import torch
from torch._C import DispatchKey
from torch._ops import HigherOrderOperator
from torch.utils._python_dispatch import TorchDispatchMode

from ..engine.context import current_rank, live_ranks, outside_rank
from ..engine.errors import SimulationError, UnsupportedOperation
from ..engine.launch import launch, launch_kernel
from . import rng, sync_debug
from .op_info import _FAST_OPS, _INFO, FUNCTIONAL, INPLACE, VIEW, op_info
from .deterministic_fill import fill_new, fills
from .op_rules import CALL_CHECKS, SPEC_FIXES, rule_for
from .probe import check_inplace, probe_specs, refuse_on_zeros
from .storage import check_usable
from .tensor import HostProxy, SimTensor, set_router, view_bytes

aten = torch.ops.aten
_IS_PINNED = aten.is_pinned.default
_make_wrapper = torch.Tensor._make_wrapper_subclass
_ref = weakref.ref
_SPEC_CACHE: dict = {}
_get_mode = torch._C._get_dispatch_mode
_FAKE = torch._C._TorchDispatchModeKey.FAKE


# --- unwrapping ----------------------------------------------------------------
def _device_error(a, b):
    return RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, "
                        f"{a} and {b}!")


class _Unwrapped:
    __slots__ = ("args", "kwargs", "sims", "key", "dev", "cpu_tensors")


def _conv(a, sims, key, flags):
    """SimTensor -> its CPU view; collects the SimTensors and the cache key. (No closures: gc is off.)"""
    t = type(a)
    if t is SimTensor:
        sims.append(a)
        if key is not None:
            key.append(a._spec)
        return a._inner
    if t is HostProxy:
        s = a._sim
        sims.append(s)
        if key is not None:
            key.append(s._spec)
        return s._inner
    if t is list or t is tuple:
        if a and any(isinstance(x, torch.Tensor) for x in a):
            if key is not None:
                key.append(len(a))
            return t([_conv(x, sims, key, flags) for x in a])
        if key is not None:
            key.append(tuple((type(x), x) for x in a))  # 1, 1.0 and True are equal keys but not equal dtypes
        return a
    if isinstance(a, torch.Tensor):
        flags[0] = True
        if key is not None:
            key.append(("cpu", a.shape, a.stride(), a.dtype))
        return a
    if key is not None:
        key.append(t)
        key.append(a)
    return a


def _unwrap(me, args, kwargs, want_key):
    unwrapped = _Unwrapped()
    sims = []
    key = [] if want_key else None
    flags = [False]
    cargs = []
    for a in args:  # the common arguments inline; _conv for the rest
        t = type(a)
        if t is SimTensor:
            sims.append(a)
            if key is not None:
                key.append(a._spec)
            cargs.append(a._inner)
        elif t is float or t is int:
            if key is not None:
                key.append(t)
                key.append(a)
            cargs.append(a)
        else:
            cargs.append(_conv(a, sims, key, flags))
    unwrapped.args = tuple(cargs)
    if kwargs:
        unwrapped.kwargs = {k: _conv(v, sims, key, flags) for k, v in kwargs.items()}
        if key is not None:
            key.append(tuple(kwargs))
    else:
        unwrapped.kwargs = {}
    unwrapped.sims = sims
    unwrapped.key = key
    unwrapped.cpu_tensors = cpu = flags[0]
    dev = sims[0]._dev if sims else None
    for s in sims:
        if s._dev is not dev:
            if s._dev.rank != dev.rank:
                raise SimulationError(f"a tensor of rank {s._dev.rank} was used by rank {dev.rank}: "
                                      "ranks are separate processes and share no memory")
            raise _device_error(dev.torch_device, s._dev.torch_device)
    if dev is not None and me is not None and dev.rank != me.rank:
        raise SimulationError(f"rank {me.rank} used a tensor that lives on rank {dev.rank}'s device: "
                              "ranks are separate processes and share no memory")
    if cpu and dev is not None:
        for a in list(args) + list(kwargs.values()):
            _check_cpu_arg(a, dev)
    unwrapped.dev = dev
    return unwrapped


def _check_cpu_arg(a, dev, scalars_too=False):
    if isinstance(a, (list, tuple)):
        for x in a:
            _check_cpu_arg(x, dev, scalars_too)
    elif isinstance(a, torch.Tensor) and type(a) not in (SimTensor, HostProxy) and (scalars_too or a.dim() != 0):
        raise _device_error(dev.torch_device, a.device)


def _check_cpu_scalars(info, unwrapped, args, kwargs):
    """A 0-dim CPU tensor is refused by ops whose CUDA wrapper checks devices (op_info.py _device_checked)."""
    if unwrapped.cpu_tensors and unwrapped.dev is not None and info.device_check:
        for a in list(args) + list(kwargs.values()):
            _check_cpu_arg(a, unwrapped.dev, True)


# --- output placement ------------------------------------------------------------
def _to_meta(a):
    t = type(a)
    if t is SimTensor or t is HostProxy:
        s = a if t is SimTensor else a._sim
        return torch.empty_strided(s.shape, s.stride(), dtype=s.dtype, device="meta")
    if t is list or t is tuple:
        return t(_to_meta(x) for x in a)
    if isinstance(a, torch.Tensor) and a.dim() == 0:
        return a
    if isinstance(a, torch.Tensor):
        return torch.empty_strided(a.shape, a.stride(), dtype=a.dtype, device="meta")
    if isinstance(a, torch.Generator):
        return None
    return a


_EMPTY_FACTORIES = {torch.ops.aten.empty.memory_format, torch.ops.aten.empty_strided.default,
                    torch.ops.aten.empty_like.default, torch.ops.aten.new_empty.default,
                    torch.ops.aten.new_empty_strided.default}


def dense_only(func, layout, nested=False):
    """simdist simulates dense (strided) tensors only: a sparse layout (COO, CSR, CSC, BSR, BSC) or a strided
    nested tensor (NestedTensorImpl) on a simulated device is refused by name. (torch.jagged nested tensors are
    a Python subclass over dense tensors, so they run.)"""
    if layout is not torch.strided or nested:
        what = "a nested tensor (torch.strided layout)" if nested else f"a {layout} tensor"
        raise UnsupportedOperation(f"{func} with {what} on a simulated CUDA device is not modelled by simdist: it "
                                   "simulates dense (strided) tensors only (nested tensors of layout=torch.jagged "
                                   "work)")


def _spec_of(r, func=None):
    if r is None:
        return None
    if r.layout is not torch.strided or r.is_nested:
        dense_only(func, r.layout, r.is_nested)
    return (tuple(r.shape), tuple(r.stride()), r.dtype)


def _out_specs(func, args, kwargs, key):
    """[(shape, stride, dtype) | None, ...] and whether the op returns a sequence."""
    ck = None
    if key is not None:
        ck = (func, tuple(key))
        try:
            hit = _SPEC_CACHE.get(ck)
        except TypeError:
            ck = None
            hit = None
        if hit is not None:
            return hit
    margs = tuple(_to_meta(a) for a in args)
    mkw = {k: _to_meta(v) for k, v in kwargs.items() if k != "generator"}
    if "device" in mkw and mkw["device"] is not None:
        mkw["device"] = "meta"
    if torch.are_deterministic_algorithms_enabled():
        res = _meta_without_alerts(func, margs, mkw)
    else:
        res = func(*margs, **mkw)
    if isinstance(res, (tuple, list)):
        out = ([_spec_of(r, func) for r in res], True)
    else:
        out = ([_spec_of(res, func)], False)
    fix = SPEC_FIXES.get(func)  # a meta kernel that disagrees with the CPU and CUDA kernels (rules/meta_fixes.py)
    if fix is not None:
        out = fix(args, kwargs, out)
    out = probe_specs(func, args, kwargs, out, op_info(func).random)  # and the real kernel's, when small (probe.py)
    if ck is not None:
        _SPEC_CACHE[ck] = out
    return out


def _meta_without_alerts(func, margs, mkw):
    """A meta kernel run for output specs only, with deterministic mode off: some meta kernels alert as CUDA's
    would (torch/_meta_registrations.py: device_hint of a meta tensor is "cuda"), one for mode where the GPU's does
    not, and a spec cached per signature would alert once only; the alerts of simulated CUDA ops are
    rules/deterministic.py's, at every call."""
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(False)
    try:
        return func(*margs, **mkw)
    finally:
        torch.use_deterministic_algorithms(True, warn_only=warn_only)


def _extent_bytes(shape, stride, dtype):
    ext = 1
    for s, st in zip(shape, stride):
        if s == 0:
            return 0
        ext += (s - 1) * st
    return ext * dtype.itemsize


def allocate(dev, stream, shape, stride, dtype, storage_nbytes=None):
    """A fresh simulated tensor; its storage spans its extent, or `storage_nbytes` where a kernel allocates more
    than the result views (probe.py: a loss's reduced output keeps the storage of its unreduced buffer)."""
    spec = (shape, stride, dtype) if storage_nbytes is None else (shape, stride, dtype, storage_nbytes)
    return _allocate_layout(dev, stream, _Layout(spec))


class _Layout:
    """An output layout known from the spec cache, with what allocate derives from it computed once."""

    __slots__ = ("spec", "shape", "stride", "dtype", "nbytes", "extent", "dense")

    def __init__(self, spec):
        self.spec = spec
        self.shape, self.stride, self.dtype = spec[0], spec[1], spec[2]
        self.extent = _extent_bytes(self.shape, self.stride, self.dtype)
        self.nbytes = spec[3] if len(spec) > 3 else self.extent  # the storage's size
        n = self.dtype.itemsize
        for d in self.shape:
            n *= d
        self.dense = n == self.extent  # no byte of the extent is skipped


def _allocate_layout(dev, stream, lay):
    """A fresh tensor of layout `lay` on the stream's pool, with its byte span (the fast path keeps its layouts)."""
    nbytes = lay.nbytes
    alloc = dev.memory.malloc(nbytes, stream)
    block = alloc.block
    if block.view_key is lay:
        # the block held this layout before: its CPU view is the same view of the same bytes (a view's metadata
        # never changes in place: in-place metadata ops give the tensor a new view, rules/metadata.py)
        inner = block.view
    else:
        inner = block.view = view_bytes(alloc, lay.shape, lay.stride, lay.dtype)
        block.view_key = lay
    t = SimTensor(inner, dev, alloc, False, lay.shape, lay.stride, 0, lay.spec)
    if lay.extent:
        lo = block.offset
        t._span = (lo, lo + lay.extent, lay.dense)
    return t


def allocate_like_contiguous(dev, stream, shape, dtype):
    stride = torch._prims_common.make_contiguous_strides_for(shape) if len(shape) else ()
    return allocate(dev, stream, tuple(shape), tuple(stride), dtype)


def _usable(sims):
    """Data is read or written: no argument may sit on a storage resized away (simdist/faces/storage.py)."""
    for s in sims:
        if s._alloc.block is None:
            check_usable(s)


def _among(t, seq):
    for x in seq:
        if x is t:
            return True
    return False


def _nbytes(ts):
    n = 0
    for t in ts:
        n += t.numel() * t.element_size()
    return n


_MM = frozenset(("mm", "bmm", "addmm", "matmul", "linear", "baddbmm"))


def _flops(info_name, sims, outs):
    if info_name in _MM and sims:
        k = sims[0].shape[-1] if sims[0].dim() else 1
        return 2 * sum(o.numel() for o in outs) * k
    return 0


# --- the dispatch mode -------------------------------------------------------------
class RankMode(TorchDispatchMode):
    """Active in each rank thread: routes ops on simulated tensors and cuda factories."""

    supports_higher_order_operators = True  # torch.cond, while_loop, map, flex_attention: see _higher_order

    def __init__(self, me):
        super().__init__()
        self.me = me
        self.cpu_rng_state = None  # the rank's host generators' states while another rank thread runs
        self.main_module = None  # the rank's sys.modules["__main__"] while another rank thread runs
        self.globals = {}  # the rank's torch module globals (patches._PROCESS_GLOBALS) while another rank thread runs
        self.c10d = None  # its torch.distributed state (simdist/faces/c10d.py RankC10d)

    @classmethod
    def _should_skip_dynamo(cls):
        return False  # keep the hot path free of torch._dynamo's disable wrapper (nothing here is compiled)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not kwargs:
            # the fast path first: it takes only SimTensor / float / int arguments, so `types` is (SimTensor,)
            # whenever it applies, and the checks below would route the op to it
            info = _FAST_OPS.get(id(func))
            if info is not None:
                r = _fast_functional(self.me, info, args)
                if r is not _MISS:
                    return r
        kwargs = kwargs or {}
        ours = False
        for t in types:
            if t is SimTensor or t is HostProxy:
                ours = True
            elif t is not torch.Tensor and t is not torch.nn.Parameter:
                if _get_mode(_FAKE) is not None:
                    return func(*args, **kwargs)  # fake tensors: the FakeTensorMode below handles them
                return NotImplemented  # a foreign subclass (e.g. a quantized tensor) unwraps first
        if not ours:
            if isinstance(func, HigherOrderOperator):
                return _higher_order(self, func, args, kwargs)
            hr = self.me.host_memory
            if hr.tensors:
                hr.check(self.me, func, args, kwargs)
            if hr.sources:
                hr.check_writes(self.me, func, args, kwargs)
            if func is _IS_PINNED:  # (torch DDP's C++ Reducer asserts a pinned staging tensor's is_pinned())
                return hr.is_pinned(args[0])
            dev = kwargs.get("device")
            if kwargs.get("pin_memory") and (dev is None or torch.device(dev).type == "cpu"):
                # a CPU build cannot page-lock: allocate plain memory and remember that it is "pinned"
                t = func(*args, **dict(kwargs, pin_memory=False))
                if func in _EMPTY_FACTORIES and t.untyped_storage().nbytes():
                    # fresh pinned memory holds whatever the caching host allocator's block held: poison, as a
                    # fresh device block (the process's malloc gave other bytes from run to run: a racy read
                    # made the digest differ for one seed)
                    torch.empty(0, dtype=torch.uint8).set_(t.untyped_storage()).fill_(0xFF)
                return hr.pin(t)
            if dev is None:
                try:
                    return func(*args, **kwargs)
                except NotImplementedError as e:
                    # an op that reached the CUDA backend of this CPU build without passing through simdist (a
                    # device given positionally, as torch.nested.nested_tensor does): not modelled
                    if "'CUDA' backend" in str(e):
                        raise UnsupportedOperation(f"{func} on a simulated CUDA device is not modelled by simdist "
                                                   f"(it reached torch's CUDA backend directly: {str(e)[:120]})") from e
                    raise
            if not isinstance(dev, torch.device):
                dev = torch.device(dev)
            if dev.type != "cuda" or _get_mode(_FAKE) is not None:
                # (under a FakeTensorMode, an infra mode below this one, a factory makes a fake tensor: DTensor's
                # sharding propagation and FSDP2's meta bookkeeping run so)
                return func(*args, **kwargs)
            rule = rule_for(func)
            if rule is not None:
                return rule(self.me, func, args, kwargs)
            return factory(self.me, func, args, kwargs, dev)
        return dispatch(self.me, func, args, kwargs)


def _higher_order(mode, hop, args, kwargs):
    """A higher-order operator (torch.cond, while_loop, map, flex_attention, ...) reaching the rank's mode: run it
    eagerly as a GPU's eager mode does, through its dense kernel (the CompositeExplicitAutograd one its CUDA key
    uses too: torch/_higher_order_ops) with the rank's mode on, so the kernel's own factories and ops and its
    body's are simulated (a tensor predicate is read with a host synchronization, as on a GPU). Kernels that
    insist on running with no mode (cond, scan, invoke_subgraph: "Mode should never be enabled for CPU/CUDA key",
    raised before they run anything) run without it, their body functions with it. The CPU build raised "There was
    no rule registered for HigherOrderOperator ... and mode RankMode". A HOP with no dense kernel is refused."""
    kernel = hop.py_kernels.get(DispatchKey.CompositeExplicitAutograd)
    if kernel is None:
        raise UnsupportedOperation(f"the higher-order operator {hop.name()} has no eager (dense) kernel for simdist "
                                   "to run on simulated tensors; it is not modelled")
    try:
        with mode:
            return kernel(*args, **kwargs)
    except AssertionError as e:
        if "Mode should never be enabled" not in str(e):
            raise

    def in_mode(f):
        def body(*a, **k):
            with mode:
                return f(*a, **k)
        return body
    args = tuple(in_mode(a) if callable(a) and not isinstance(a, torch.Tensor) else a for a in args)
    return kernel(*args, **kwargs)


def dispatch_outside(func, types, args, kwargs):
    """An op on a simulated tensor outside any rank thread: only reading results is allowed."""
    for t in types:
        if t is not SimTensor and t is not HostProxy and t is not torch.Tensor and t is not torch.nn.Parameter:
            return NotImplemented  # a foreign subclass (DTensor, a quantized tensor) unwraps first
    me = current_rank()
    if me is not None:
        return dispatch(me, func, args, kwargs)
    if live_ranks():  # a host thread the program started, during the run: its reads would be unordered
        raise outside_rank(f"{func} on a simulated CUDA tensor", "")
    info = op_info(func)
    if info.kind == VIEW or func in (aten._to_copy.default, aten._local_scalar_dense.default, aten.clone.default):
        unwrapped = _unwrap(None, args, kwargs, False)
        if func is aten._to_copy.default:
            unwrapped.kwargs["device"] = torch.device("cpu")
        res = func(*unwrapped.args, **unwrapped.kwargs)
        if info.kind == VIEW:
            src = unwrapped.sims[0]
            return SimTensor(res, src._dev, src._alloc)
        return res.clone() if isinstance(res, torch.Tensor) else res
    raise SimulationError(f"{func} on a simulated CUDA tensor outside simdist.run(): "
                          "tensors returned by a run are converted to CPU tensors; keep using those")


# ATen's advanced indexing takes index tensors on the CPU for a CUDA tensor (TensorAdvancedIndexing.cpp: the
# indices are moved to self's device with `.to(self.device())`, a blocking host-to-device copy, before the kernel)
_HOST_INDICES_OK = frozenset({aten.index.Tensor, aten.index_put.default, aten.index_put_.default,
                              aten._index_put_impl_.default})


def _host_index(i) -> bool:
    return isinstance(i, torch.Tensor) and type(i) not in (SimTensor, HostProxy)


def dispatch(me, func, args, kwargs):
    check = CALL_CHECKS.get(func)
    if check is not None:
        check(func, args, kwargs)
    if func in _HOST_INDICES_OK and len(args) > 1 and any(_host_index(i) for i in args[1]):
        to_copy = op_info(aten._to_copy.default).rule
        dev = args[0].device
        args = (args[0], [to_copy(me, aten._to_copy.default, (i,), {"device": dev}) if _host_index(i) else i
                          for i in args[1]]) + tuple(args[2:])
    info = _INFO.get(func)
    if info is None:
        info = op_info(func)
    if info.rule is not None:
        return info.rule(me, func, args, kwargs)
    if info.implicit and info.kind is VIEW and _inference_mode():
        # a CompositeImplicitAutograd op whose result may or may not alias its input (to, contiguous, reshape,
        # flatten, expand_as, ...) reaches the mode only under inference mode (the Autograd keys that decompose it
        # are excluded there): run its decomposition, whose ops say which; run whole, it was taken for a view of
        # its input while its CPU result was a new tensor (`t.bool()` read poison). Other composite ops keep
        # running whole, as a GPU's fused kernels do (silu, rms_norm: tests/test_torch_surface.py)
        with me.face:
            r = func.decompose(*args, **kwargs)
        if r is not NotImplemented:
            return r
    if info.python_kernel is not None:  # an op written in Python: its own ops are simulated one by one
        return func.redispatch(info.python_kernel, *args, **kwargs)
    kind = info.kind
    if kind is VIEW:
        return _view(me, func, info, args, kwargs)
    if kind is INPLACE:
        return _inplace(me, func, info, args, kwargs)
    if kind is FUNCTIONAL:
        return _functional(me, func, info, args, kwargs)
    return _host_read(me, func, info, args, kwargs)


def _view(me, func, info, args, kwargs):
    if _inference_mode() and not args[0].is_inference():
        # under torch.inference_mode() a view of a tensor made outside it is an ordinary tensor (c10/core/
        # InferenceMode.h: views keep their base's kind); a wrapper made while the mode is on would be an
        # inference tensor, which autograd's view bookkeeping refuses ("Cannot set version_counter for inference
        # tensor": every Linear's w.t() under Megatron's inference engine)
        with torch.inference_mode(False):
            return _view_of(me, func, args, kwargs)
    return _view_of(me, func, args, kwargs)


_inference_mode = torch.is_inference_mode_enabled


def _view_of(me, func, args, kwargs):
    unwrapped = _unwrap(me, args, kwargs, False)
    res = func(*unwrapped.args, **unwrapped.kwargs)
    src = unwrapped.sims[0]
    dev, alloc = src._dev, src._alloc
    if isinstance(res, torch.Tensor):
        return _lazy_bits(SimTensor(res, dev, alloc), res)
    return type(res)(_lazy_bits(SimTensor(r, dev, alloc), r) for r in res)


def _lazy_bits(t, inner):
    """A view keeps its CPU view's conjugate and negative bits (conj(), _neg_view(), views of those) on the
    simulated tensor too, so that torch's Conjugate / Negative fallbacks resolve them before an op that does not
    handle them reaches simdist, as they do before a CUDA kernel (aten/src/ATen/ConjugateFallback.cpp). Inside a
    __torch_dispatch__ handler those keys are excluded: a CPU kernel then reads the bytes as they are, and
    `a * b.conj()` multiplied by b itself."""
    if inner.is_conj():
        torch._C._set_conj(t, True)
    if inner.is_neg():
        torch._C._set_neg(t, True)
    return t


def _with_generator(info, unwrapped, dev):
    """Random ops take their (seed, offset) at launch, as CUDA's Philox does (simdist.rng)."""
    if info.has_generator:
        unwrapped.kwargs["generator"] = rng.generator_for(rng.launch_seed(unwrapped.kwargs.get("generator") or dev.generator))


def _random_seed(info, dev):
    """For random ops without a generator argument (dropout): their seed, taken at launch."""
    return rng.launch_seed(dev.generator) if info.random and not info.has_generator else None


def _run_random(seed, call):
    """Run a random op whose schema takes no generator (dropout, randn.default...) with its launch seed."""
    if seed is not None:
        g = torch.default_generator  # not torch.manual_seed: that would also reseed the simulated devices
        state = g.get_state()
        g.manual_seed(seed)
        try:
            return call()
        finally:
            g.set_state(state)
    return call()


def _inplace(me, func, info, args, kwargs, kernel=None):
    """An in-place op: its kernel (`kernel`, when a rule computes it otherwise than the CPU op) writes its
    mutable arguments at the op's end."""
    unwrapped = _unwrap(me, args, kwargs, False)
    _usable(unwrapped.sims)
    dev = unwrapped.dev
    if dev is None:
        return func(*args, **kwargs)
    _check_cpu_scalars(info, unwrapped, args, kwargs)
    writes = []
    for pos, name in zip(info.mutable_pos, info.mutable_names):
        a = args[pos] if pos < len(args) else kwargs.get(name)
        if a is None:
            continue
        if isinstance(a, (list, tuple)):
            writes.extend(_sim_of(x) for x in a)
        else:
            writes.append(_sim_of(a))
    for w in writes:
        if type(w) is not SimTensor:
            raise _device_error(dev.torch_device, w.device)
    check_inplace(func, args, kwargs, info.random)  # the host's checks, at the call (probe.py)
    _with_generator(info, unwrapped, dev)
    seed = _random_seed(info, dev)
    call_args, call_kwargs = unwrapped.args, unwrapped.kwargs
    stream = me.current_stream(dev.index)

    run = func if kernel is None else kernel
    for w in writes:
        if _overlaps_itself(w):
            run = _snapshot_kernel(run, w._inner, info.name)

    def fn():
        _run_random(seed, lambda: run(*call_args, **call_kwargs))

    nbytes = _nbytes(unwrapped.sims)
    reads = unwrapped.sims
    if info.name.split(".")[0] in _WRITE_ONLY:  # fill_, zero_, random fills: they never read what they overwrite
        reads = [x for x in unwrapped.sims if not _among(x, writes)]
    launch(me, stream, info.name, "kernel", fn, reads, writes, nbytes, skip=5)
    # return what the schema says is returned: the mutated arguments themselves
    outs = []
    for pos in info.ret_alias:
        if pos is None:
            continue
        a = args[pos] if pos < len(args) else kwargs.get(info.mutable_names[info.mutable_pos.index(pos)])
        outs.append(a)
    if not info.ret_alias:
        return None
    if len(func._schema.returns) == 1:
        return outs[0] if outs else None
    return tuple(outs)


def _overlaps_itself(t):
    """Whether two elements of `t` are one memory location, where torch's overlap check cannot tell (TOO_HARD:
    as_strided with strides smaller than the sizes they step over, unfold with a step below its size); an
    expanded tensor (stride 0) is torch's own YES, checked at the call (probe.check_inplace)."""
    if t.numel() < 2:
        return False
    dims = sorted((st, n) for n, st in zip(t.shape, t.stride()) if n > 1)
    if any(st == 0 for st, _ in dims):
        return False
    reach = 0  # the farthest element the smaller strides reach: a larger stride stepping past it cannot collide
    for st, n in dims:
        if st <= reach:
            return _offsets(t._inner).unique().numel() < t.numel()  # (maybe: count the locations)
        reach += (n - 1) * st
    return False


def _offsets(inner):
    idx = torch.zeros(tuple(inner.shape), dtype=torch.int64)
    for d, (n, st) in enumerate(zip(inner.shape, inner.stride())):
        shape = [1] * inner.dim()
        shape[d] = n
        idx = idx + (torch.arange(n, dtype=torch.int64) * st).reshape(shape)
    return idx.reshape(-1)


def _snapshot_kernel(run, inner, name):
    """An in-place kernel writing through a view whose elements share memory: a GPU's threads read their
    elements before any writes them, so each element is computed from the values before the op (measured on an
    H200: arange(6.).as_strided((2, 2), (1, 1)).add_(1) gives [1, 2, 3, 3, 4, 5]; unfold(0, 3, 1).mul_(2) doubles
    each element once), where the CPU kernel's loop reads elements earlier iterations wrote ([1, 3, 3, ...]). The
    op runs on a copy of the view's values and the elements it changed are stored (an index op leaves the others
    unwritten); where it gives one memory location two different values, which one a GPU keeps depends on its
    threads' order: refused by name."""
    def _ne(a, b):  # bit for bit: -0.0 is not 0.0, a NaN is itself
        if a.is_floating_point():
            bits = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
            return a.contiguous().view(bits) != b.contiguous().view(bits)
        return a != b

    def snapshot(*args, **kwargs):
        pre = inner.clone()
        copy = pre.clone()
        args = tuple(copy if a is inner else a for a in args)
        kwargs = {k: (copy if v is inner else v) for k, v in kwargs.items()}
        run(*args, **kwargs)
        changed = _ne(copy, pre)
        offs, vals = _offsets(inner)[changed.reshape(-1)], copy[changed]
        order = torch.argsort(offs, stable=True)
        o, v = offs[order], vals[order]
        same = o[1:] == o[:-1]
        if bool(_ne(v[1:][same], v[:-1][same]).any()):
            raise UnsupportedOperation(
                f"{name} writes different values to one memory location through a view whose elements share memory "
                "(as_strided / unfold): which one a GPU keeps depends on the order of its threads; simdist does not "
                "model it (clone() the view first)")
        inner[changed] = copy[changed]
    return snapshot


_WRITE_ONLY = frozenset(("fill_", "zero_", "uniform_", "normal_", "bernoulli_", "random_", "exponential_",
                         "geometric_", "log_normal_", "cauchy_"))


def _sim_of(a):
    return a._sim if type(a) is HostProxy else a


def _functional(me, func, info, args, kwargs, kernel=None):
    """A functional op: outputs placed from its spec, computed at the op's end by the CPU op (or by `kernel`,
    when a rule computes it otherwise)."""
    unwrapped = _unwrap(me, args, kwargs, True)
    _usable(unwrapped.sims)
    dev = unwrapped.dev
    if dev is None:
        return func(*args, **kwargs)
    _check_cpu_scalars(info, unwrapped, args, kwargs)
    if kwargs and kwargs.get("device") is not None:  # new_zeros(..., device=cuda:0) as autograd's C++ calls it
        if torch.device(kwargs["device"]).type == "cuda":
            unwrapped.kwargs["device"] = torch.device("cpu")
    try:
        specs, is_seq = _out_specs(func, args, kwargs, unwrapped.key)
    except NotImplementedError as e:  # data-dependent output size or no meta kernel: compute it synchronously
        if "not implemented for '" in str(e):
            raise  # a dtype the kernel (or CUDA's: rules/meta_fixes.py) does not implement: refused at the call
        if "'CUDA' backend" in str(e):
            # a device passed positionally reached this CPU build's CUDA backend: the CPU op cannot compute it
            # either (torch.nested.nested_tensor's _nested_tensor_from_tensor_list makes a strided nested tensor so)
            if "nested" in str(func):
                dense_only(func, torch.strided, True)
            raise UnsupportedOperation(f"{func} on a simulated CUDA device is not modelled by simdist (it reached "
                                       f"torch's CUDA backend directly: {str(e)[:120]})") from e
        return _sync_compute(me, func, info, unwrapped)
    except Exception as e:  # noqa: BLE001
        # a shape/dtype error in the program raises here, at the call, as torch would: the real op refuses
        # zeros of the arguments' layouts too. If it accepts them the meta kernel was the problem (an output
        # size that depends on the data: repeat_interleave of a tensor of repeats), and the op runs
        # synchronously on the real data once its producers have run. (Not on the data as it is now: queued
        # kernels have not written it yet; poison read as repeats was refused as negative.)
        if not info.random:
            refuse_on_zeros(func, args, kwargs, type(e))
        return _sync_compute(me, func, info, unwrapped)
    stream = me.current_stream(dev.index)
    outs = [allocate(dev, stream, *s) if s is not None else None for s in specs]
    if (kernel is None and not kwargs and not is_seq and info.out_variant is not None and not info.random
            and specs[0] is not None and not unwrapped.cpu_tensors and unwrapped.key is not None):
        _FAST_SPECS[(id(func), *unwrapped.key)] = _Layout(specs[0])  # later calls with it take _fast_functional
    if info.has_generator:
        _with_generator(info, unwrapped, dev)
    seed = _random_seed(info, dev) if info.random else None
    call_args, call_kwargs = unwrapped.args, unwrapped.kwargs
    ov = info.out_variant if kernel is None else None
    run = func if kernel is None else kernel
    if ov is not None and not is_seq and outs[0] is not None and not info.random:
        oi = outs[0]._inner

        def fn():
            ov(*call_args, **call_kwargs, out=oi)
    else:
        inners = [o._inner if o is not None else None for o in outs]

        def fn():
            res = _run_random(seed, lambda: run(*call_args, **call_kwargs))
            if not is_seq:
                res = (res,)
            for o, r in zip(inners, res):
                if o is not None:
                    o.copy_(r)

    real_outs = [o for o in outs if o is not None]
    nbytes = _nbytes(unwrapped.sims)
    for o in real_outs:
        nbytes += o._alloc.nbytes
    reads = unwrapped.sims if info.reads_data else ()
    launch(me, stream, info.name, "kernel", fn, reads, real_outs, nbytes,
           _flops(info.name, unwrapped.sims, real_outs) if info.name in _MM else 0, skip=5)
    if is_seq:
        return tuple(outs) if isinstance(specs, list) else outs
    return outs[0]


_FAST_SPECS: dict = {}
_MISS = object()


def _fast_functional(me, info, args):
    """_functional for its commonest case, fused: positional SimTensor / float / int arguments, an output-shape
    cache hit, an `.out` overload, no randomness. Anything else returns _MISS and takes the general path."""
    key = [id(info.func)]
    cargs = []
    sims = []
    dev = None
    nbytes = 0
    for a in args:
        t = type(a)
        if t is SimTensor:
            if a._alloc.block is None:
                return _MISS
            d = a._dev
            if d is not dev:
                if dev is not None:
                    return _MISS
                dev = d
            key.append(a._spec)
            cargs.append(a._inner)
            sims.append(a)
            sp = a._span
            nbytes += sp[1] - sp[0] if sp is not None else a.numel() * a.element_size()
        elif t is float or t is int:
            key.append(t)
            key.append(a)
            cargs.append(a)
        else:
            return _MISS
    if dev is None or dev.rank != me.rank:
        return _MISS
    lay = _FAST_SPECS.get(tuple(key))
    if lay is None:
        return _MISS
    stream = me.current_streams.get(dev.index)
    if stream is None:
        stream = dev.default_stream
    # _allocate_layout(dev, stream, lay), inlined, with SimTensor.__new__'s work for a fresh allocation
    lnb = lay.nbytes
    alloc = dev.memory.malloc(lnb, stream)
    block = alloc.block
    if block.view_key is lay:
        inner = block.view
    else:
        inner = block.view = view_bytes(alloc, lay.shape, lay.stride, lay.dtype)
        block.view_key = lay
    # (storage offset 0 and requires_grad False are _make_wrapper_subclass's defaults: each keyword given costs)
    out = _make_wrapper(SimTensor, lay.shape, strides=lay.stride, dtype=lay.dtype, device=dev.torch_device)
    out._inner = inner
    out._dev = dev
    out._alloc = alloc
    out._spec = lay.spec
    if lay.extent:
        lo = block.offset
        out._span = (lo, lo + lay.extent, lay.dense)
    else:
        out._span = None
    ref = _ref(out)
    alloc.views.append(ref)  # (a fresh allocation: no dead views to forget)
    made = me.backward_made
    if made is not None:  # a backward pass may record_stream it (guard_events._record_data)
        made.append(ref)
    launch_kernel(me, stream, info.name, partial(info.out_op, *cargs, out=inner), sims, out, nbytes + lnb,
                  _flops(info.name, sims, (out,)) if info.name in _MM else 0, skip=4)
    return out


def _sync_compute(me, func, info, unwrapped):
    """Ops whose output size depends on the data (nonzero, masked_select, unique...).

    On a GPU these synchronize the host with the current stream, so here the
    host waits for the op, then places the result in fresh device memory.
    """
    dev = unwrapped.dev
    stream = me.current_stream(dev.index)
    holder = []
    call_args, call_kwargs = unwrapped.args, unwrapped.kwargs
    sync_debug.synchronizing(me)  # the count's copy to the host (stream_synchronize / memcpy_and_sync)
    _with_generator(info, unwrapped, dev)
    op = launch(me, stream, info.name, "kernel", lambda: holder.append(func(*call_args, **call_kwargs)), unwrapped.sims, [],
                _nbytes(unwrapped.sims))
    me.wait_op(op, f"{info.name} (data-dependent output size)")
    res = holder[0]
    lay = _CUDA_LAYOUTS.get(func)
    if lay is not None:
        res = lay(res, call_args, call_kwargs)
    seq = isinstance(res, (tuple, list))
    outs, pairs = [], []
    for r in (res if seq else (res,)):
        if r is None:
            outs.append(None)
            continue
        # the storage and layout the kernel gave: nonzero / argwhere are column-major, unique_consecutive keeps
        # the storage it sized for every input element (CPU and CUDA alike: ATen allocates, then resize_s down)
        o = _like_storage(dev, stream, r, func)
        outs.append(o)
        pairs.append((o._inner, r))  # (the view at launch: a later set_ / storage resize gives o another)
    if pairs:
        # the output is allocated after the host sync and written by a kernel launched after it (CUDA's nonzero:
        # count, copy to the host, synchronize, resize the output, then the kernel that writes it,
        # aten/src/ATen/native/cuda/Nonzero.cu; masked_select and unique likewise), so the write is ordered after
        # whatever the host learned at the sync, a block the allocator released then included
        def write(pairs=pairs):
            for oi, r in pairs:
                oi.copy_(r)
        launch(me, stream, info.name, "kernel", write, [], [o for o in outs if o is not None],
               sum(r.numel() * r.element_size() for _, r in pairs))
    return tuple(outs) if seq else outs[0]


def _in_storage_of(t, numel):
    """t viewed at the start of a storage of `numel` elements (the rest never written)."""
    buf = torch.empty(max(numel, t.numel()), dtype=t.dtype)
    buf[:t.numel()].copy_(t.reshape(-1))
    return buf[:t.numel()].view(t.shape)


def _unique2_layout(res, args, kwargs):
    # CUDA's _unique2 (aten/src/ATen/native/cuda/Unique.cu, thrust/cub) sorts into buffers of the input's size and
    # narrows them: values and counts keep storages of the input's element count (measured on an H200: unique of
    # 6 int64 elements with 4 distinct keeps 48 bytes; counts likewise); the CPU kernel sizes them exactly
    # (a bool input takes CUDA's two-bucket path: storages of 2 elements, measured on the H200 as well)
    n = 2 if args[0].dtype is torch.bool else args[0].numel()
    values, inverse, counts = res
    return (_in_storage_of(values, n), inverse, _in_storage_of(counts, n) if counts.numel() else counts)


def _dim_layout(res, args, kwargs):
    # unique_dim / unique_consecutive(dim=...) on CUDA give a row-major result and exactly sized counts (measured on
    # an H200: unique of a (3, 2, 2) tensor along dim 2 has strides (4, 2, 1), the CPU kernel's (2, 1, 6), so a
    # .view(-1) that works on a GPU raised under simdist)
    values, inverse, counts = res
    dim = 0  # unique_dim always has one
    if len(args) < 2 or isinstance(args[1], bool) or "dim" in kwargs:  # unique_consecutive(self, inv, counts, dim)
        dim = args[3] if len(args) > 3 else kwargs.get("dim")
    if dim is None:  # unique_consecutive without dim: its counts too keep a storage of the input's size
        return (values, inverse, _in_storage_of(counts, args[0].numel()) if counts.numel() else counts)
    return (values.contiguous(), inverse, counts.clone() if counts.numel() else counts)


_CUDA_LAYOUTS = {aten._unique2.default: _unique2_layout, aten.unique_dim.default: _dim_layout,
                 aten.unique_consecutive.default: _dim_layout}


def _like_storage(dev, stream, r, func=None):
    """A simulated tensor with r's sizes, strides and storage offset over a storage of r's size (the bytes
    outside r's view are fresh memory, as the kernel's were never written)."""
    if r.layout is not torch.strided or r.is_nested:
        dense_only(func, r.layout, r.is_nested)
    alloc = dev.memory.malloc(r.untyped_storage().nbytes(), stream)
    return SimTensor(view_bytes(alloc, tuple(r.shape), tuple(r.stride()), r.dtype, r.storage_offset()), dev, alloc)


def _host_read(me, func, info, args, kwargs):
    """Ops that return Python values (equal, is_nonzero...): the host waits for the result."""
    unwrapped = _unwrap(me, args, kwargs, False)
    dev = unwrapped.dev
    if dev is None:
        return func(*args, **kwargs)
    _check_cpu_scalars(info, unwrapped, args, kwargs)
    holder = []
    _usable(unwrapped.sims)
    call_args, call_kwargs = unwrapped.args, unwrapped.kwargs
    sync_debug.synchronizing(me)  # a value copied to the host (memcpy_and_sync)
    stream = me.current_stream(dev.index)
    op = launch(me, stream, info.name, "d2h", lambda: holder.append(func(*call_args, **call_kwargs)), unwrapped.sims, [],
                _nbytes(unwrapped.sims))
    me.wait_op(op, info.name)
    return holder[0]


# --- factories ---------------------------------------------------------------------
_EMPTY = {aten.empty.memory_format, aten.empty_strided.default}  # allocation only: fresh memory keeps its bytes


def _poisoned_host(shape, dtype):
    t = torch.empty(shape, dtype=dtype)
    if t.numel():
        t.view(-1).view(torch.uint8).fill_(0xFF) if t.is_contiguous() else None
    return t


def _factory_device(me, dev):
    idx = dev.index if dev.index is not None else me.current_device
    return me.device(idx)


def factory(me, func, args, kwargs, tdev):
    if kwargs.get("pin_memory"):
        # aten/src/ATen/cuda/EmptyTensor.cpp empty_cuda: TORCH_CHECK(!pin_memory..., every CUDA factory's allocation
        raise RuntimeError("Only dense CPU tensors can be pinned")
    dev = _factory_device(me, tdev)
    mkw = dict(kwargs)
    mkw["device"] = "meta"
    mkw.pop("pin_memory", None)
    if "generator" in mkw:
        mkw["generator"] = None  # a CPU generator cannot drive a meta kernel; shapes do not depend on it
    try:
        res = func(*args, **mkw)
    except Exception as e:  # noqa: BLE001
        raise UnsupportedOperation(f"simdist cannot create {func} on a simulated device: {e}") from e
    stream = me.current_stream(dev.index)
    out = allocate(dev, stream, tuple(res.shape), tuple(res.stride()), res.dtype)
    if func in _EMPTY:
        if fills():
            fill_new(me, out, stream)
        return out
    info = op_info(func)
    ckw = dict(kwargs)
    ckw["device"] = "cpu"
    ckw.pop("pin_memory", None)
    if info.has_generator:
        ckw["generator"] = rng.generator_for(rng.launch_seed(ckw.get("generator") or dev.generator))
    seed = _random_seed(info, dev)
    oi = out._inner

    def fn():
        oi.copy_(_run_random(seed, lambda: func(*args, **ckw)))

    launch(me, stream, info.name, "kernel", fn, (), (out,), _nbytes((out,)))
    return out




set_router(dispatch_outside)
