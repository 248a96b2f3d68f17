"""The per-op front door: every aten op on a simulated tensor lands here.

For each op: classify it once (view / in-place / functional / host-reading),
find where its outputs live (a meta-tensor shape inference, cached per
signature), allocate them from the simulated caching allocator, record the
accesses for happens-before, and queue the real CPU computation to run at the
op's virtual end time. Views run at once (they touch no bytes).
"""
from __future__ import annotations

from functools import partial
from heapq import heappush

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from . import rng
from .cost import FLOPS_PER_NS, HBM_BYTES_PER_NS, KERNEL_FIXED_NS
from .shadow import Rec
from .errors import SimulationError, UnsupportedOperation
from .tensor import HostProxy, SimTensor
from .timeline import LAUNCH_NS, Op, capture_frames
from .world import current_rank

aten = torch.ops.aten
_TensorType = torch._C.TensorType
DRAIN_EVERY = 512

VIEW, INPLACE, FUNCTIONAL, SCALAR = "view", "inplace", "functional", "scalar"


class OpInfo:
    __slots__ = ("kind", "mutable_pos", "mutable_names", "ret_alias", "has_generator", "name", "out_variant",
                 "special", "random", "func", "out_op", "reads_data")

    def __init__(self):
        self.special = None
        self.out_variant = None
        self.out_op = None
        self.func = None


_INFO: dict = {}
_SPECIAL: dict = {}
_SPEC_CACHE: dict = {}


def _is_tensorish(t):
    if isinstance(t, _TensorType):
        return True
    el = getattr(t, "getElementType", None)
    if el is not None:
        return _is_tensorish(el())
    return False


def _classify(func):
    info = OpInfo()
    schema = func._schema
    info.name = func.__name__ if hasattr(func, "__name__") else str(func)
    info.name = str(func).replace("aten.", "").replace(".default", "")
    args = schema.arguments
    info.mutable_pos = tuple(i for i, a in enumerate(args) if a.alias_info is not None and a.alias_info.is_write)
    info.mutable_names = tuple(args[i].name for i in info.mutable_pos)
    info.has_generator = any(a.name == "generator" for a in args)
    # random: this overload or a sibling takes a generator (randn.default has none, randn.generator has one)
    info.random = (info.has_generator or schema.name in ("aten::native_dropout", "aten::rrelu_with_noise")
                   or _packet_is_random(func))
    rets = schema.returns
    ret_alias = []
    for r in rets:
        ai = r.alias_info
        if ai is None:
            ret_alias.append(None)
            continue
        sets = set(ai.before_set)
        pos = next((i for i in info.mutable_pos if set(args[i].alias_info.before_set) & sets), None)
        ret_alias.append(pos)
    info.ret_alias = tuple(ret_alias)
    if info.mutable_pos:
        info.kind = INPLACE
    elif any(r.alias_info is not None for r in rets) or schema.name == "aten::_unsafe_view":
        info.kind = VIEW
    elif rets and all(_is_tensorish(r.type) for r in rets):
        info.kind = FUNCTIONAL
        # Only core ATen ops (structured kernels) have .out overloads that compute exactly what the functional
        # computes into the given tensor; a composite's (mse_loss.out) may resize `out` on the way, which on a
        # view of a simulated segment would write past the block. Those run functionally and copy.
        core = getattr(torch.Tag, "core", None)
        if core is not None and core in func.tags:
            info.out_variant = _find_out_variant(func)
        if info.out_variant is not None:
            info.out_op = info.out_variant._op  # the C callable under OpOverload.__call__
    else:
        info.kind = SCALAR
    base = schema.name.split("::")[-1]
    info.reads_data = not (base.endswith("_like") or base in ("new_zeros", "new_ones", "new_full", "new_empty",
                                                             "new_empty_strided"))  # metadata only
    info.special = _SPECIAL.get(func)
    if schema.name.startswith(("_c10d_functional::", "c10d::", "_dtensor::")):
        info.special = _unsupported_collective  # would run locally and return one rank's data: refuse
    return info


def _packet_is_random(func):
    packet = getattr(func, "_overloadpacket", None)
    if packet is None:
        return False
    for name in packet.overloads():
        try:
            if any(a.name == "generator" for a in getattr(packet, name)._schema.arguments):
                return True
        except Exception:  # noqa: BLE001 - an overload torch cannot resolve here
            continue
    return False


def _find_out_variant(func):
    """The `.out` overload taking exactly the functional's arguments plus `out` (single output only)."""
    schema = func._schema
    if len(schema.returns) != 1:
        return None
    names = [(a.name, str(a.type)) for a in schema.arguments]
    packet = func._overloadpacket
    for ov_name in packet.overloads():
        ov = getattr(packet, ov_name)
        s = ov._schema
        outs = [a for a in s.arguments if a.alias_info is not None and a.alias_info.is_write]
        if len(outs) != 1 or outs[0].name != "out":
            continue
        if [(a.name, str(a.type)) for a in s.arguments if a.name != "out"] == names:
            return ov
    return None


# id(op) -> OpInfo for functional ops with an .out overload and no randomness: _fast_functional may take them.
# Keyed by id: OpOverload.__hash__ is a Python method. The OpInfo holds the op, so the id stays unique.
_FAST_OPS: dict = {}


def op_info(func):
    i = _INFO.get(func)
    if i is None:
        i = _INFO[func] = _classify(func)
        if (i.kind == FUNCTIONAL and i.out_variant is not None and not i.random and i.special is None
                and i.reads_data):
            i.func = func
            _FAST_OPS[id(func)] = i
    return i


def special(*funcs):
    def deco(fn):
        for f in funcs:
            _SPECIAL[f] = fn
        return fn
    return deco


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


def _unwrap(rs, args, kwargs, want_key):
    u = _Unwrapped()
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
    u.args = tuple(cargs)
    if kwargs:
        u.kwargs = {k: _conv(v, sims, key, flags) for k, v in kwargs.items()}
        if key is not None:
            key.append(tuple(kwargs))
    else:
        u.kwargs = {}
    u.sims = sims
    u.key = key
    u.cpu_tensors = cpu = flags[0]
    dev = sims[0]._dev if sims else None
    for s in sims:
        if s._dev is not dev:
            if s._dev.rank != dev.rank:
                raise SimulationError(f"a tensor of rank {s._dev.rank} was used by rank {dev.rank}: "
                                      "ranks are separate processes and share no memory")
            raise _device_error(dev.torch_device, s._dev.torch_device)
    if dev is not None and rs is not None and dev.rank != rs.rank:
        raise SimulationError(f"rank {rs.rank} used a tensor that lives on rank {dev.rank}'s device: "
                              "ranks are separate processes and share no memory")
    if cpu and dev is not None:
        for a in list(args) + list(kwargs.values()):
            _check_cpu_arg(a, dev)
    u.dev = dev
    return u


def _check_cpu_arg(a, dev):
    if isinstance(a, (list, tuple)):
        for x in a:
            _check_cpu_arg(x, dev)
    elif isinstance(a, torch.Tensor) and type(a) not in (SimTensor, HostProxy) and a.dim() != 0:
        raise _device_error(dev.torch_device, a.device)


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


def _spec_of(r):
    if r is None:
        return None
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
    res = func(*margs, **mkw)
    if isinstance(res, (tuple, list)):
        out = ([_spec_of(r) for r in res], True)
    else:
        out = ([_spec_of(res)], False)
    if ck is not None:
        _SPEC_CACHE[ck] = out
    return out


def _extent_bytes(shape, stride, dtype):
    ext = 1
    for s, st in zip(shape, stride):
        if s == 0:
            return 0
        ext += (s - 1) * st
    return ext * dtype.itemsize


def allocate(dev, stream, shape, stride, dtype):
    mem = dev.memory
    nbytes = _extent_bytes(shape, stride, dtype)
    alloc = mem.malloc(nbytes, stream)
    t = SimTensor(mem.view(alloc, shape, stride, dtype), dev, alloc, False, shape, stride, 0)
    if nbytes:
        n = dtype.itemsize
        for d in shape:
            n *= d
        lo = alloc.block.offset
        t._span = (lo, lo + nbytes, n == nbytes)  # dense when no byte of the extent is skipped
    return t


def allocate_like_contiguous(dev, stream, shape, dtype):
    stride = torch._prims_common.make_contiguous_strides_for(shape) if len(shape) else ()
    return allocate(dev, stream, tuple(shape), tuple(stride), dtype)


# --- launching -------------------------------------------------------------------
def launch(rs, stream, name, kind, fn, reads, writes, nbytes, flops=0, dur=None, coll=None, skip=2):
    """Queue device work on `stream` and check its accesses. reads/writes: SimTensors.

    skip: frames between launch's caller and the program (capture_frames); the per-op paths pass their own.
    """
    world = rs.world
    host = rs.host
    if stream.host_ver != host.ver:
        stream.sync_host(host)
    op = Op(stream, name, kind, host.clock, fn)
    stream.seq += 1
    op.seq = stream.seq
    op.vc = stream.vc
    op.frames = capture_frames(8, skip)
    if coll is not None:
        op.coll = coll
        coll.arrive(rs, op)
        dur = 0
    else:
        key = (rs.rank, stream.name, op.seq)
        if dur is None:
            dur = world.policy.kernel(key, KERNEL_FIXED_NS + nbytes // HBM_BYTES_PER_NS + flops // FLOPS_PER_NS)
        world.schedule_log[key] = dur
    op.dur = dur
    tail = stream.tail
    if tail is None or tail.end is not None:
        # fast path of World.schedule: the predecessor already has a time
        start = op.launch if tail is None or tail.end < op.launch else tail.end
        op.start_lb = start
        if coll is None:  # World._start_all for one kernel nobody waits on yet
            op.start = start
            op.end = end = start + dur
            if fn is not None:
                world._tie += 1
                heappush(world.heap, (end, world._tie, op))
            else:
                op.done = True
        else:
            world._started(op)
    else:
        world.schedule(op, (tail,))
    stream.tail = op
    host.clock += LAUNCH_NS
    shadow = world.shadow
    for t in writes:
        a, sp = t._alloc, t._span
        rmw = bool(reads) and _in(t, reads)  # read-modify-write: an in-place op or in-place collective
        if sp is not None and not a.records:  # Shadow.access on untouched bytes (a fresh output): one record
            a.records = [Rec(op, sp[0], sp[1], True, a.id, sp[2], t._inner, rmw)]
        else:
            shadow.access(op, t._inner, a, True, sp, rmw)
    for t in reads:
        if not _in(t, writes):
            shadow.access(op, t._inner, t._alloc, False, t._span)
    world.launches += 1
    if world.launches % DRAIN_EVERY == 0:
        world.drain_safe()
    return op


def _in(t, seq):
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

    def __init__(self, rs):
        super().__init__()
        self.rs = rs

    @classmethod
    def _should_skip_dynamo(cls):
        return False  # keep the hot path free of torch._dynamo's disable wrapper (nothing here is compiled)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        ours = False
        for t in types:
            if t is SimTensor or t is HostProxy:
                ours = True
            elif t is not torch.Tensor and t is not torch.nn.Parameter:
                return NotImplemented  # a foreign subclass (e.g. a quantized tensor) unwraps first
        if not ours:
            hr = self.rs.world.host_reads
            if hr.tensors:
                hr.check(self.rs, func, args, kwargs)
            if hr.sources:
                hr.check_writes(self.rs, func, args, kwargs)
            dev = kwargs.get("device")
            if kwargs.get("pin_memory") and (dev is None or torch.device(dev).type == "cpu"):
                # a CPU build cannot page-lock: allocate plain memory and remember that it is "pinned"
                return hr.pin(func(*args, **dict(kwargs, pin_memory=False)))
            if dev is None:
                return func(*args, **kwargs)
            if not isinstance(dev, torch.device):
                dev = torch.device(dev)
            if dev.type != "cuda":
                return func(*args, **kwargs)
            sp = _SPECIAL.get(func)
            if sp is not None:
                return sp(self.rs, func, args, kwargs)
            return factory(self.rs, func, args, kwargs, dev)
        if not kwargs:
            info = _FAST_OPS.get(id(func))
            if info is not None:
                r = _fast_functional(self.rs, info, args)
                if r is not _MISS:
                    return r
        return dispatch(self.rs, func, args, kwargs)


def dispatch_outside(func, types, args, kwargs):
    """An op on a simulated tensor outside any rank thread: only reading results is allowed."""
    rs = current_rank()
    if rs is not None:
        return dispatch(rs, func, args, kwargs)
    info = op_info(func)
    if info.kind == VIEW or func in (aten._to_copy.default, aten._local_scalar_dense.default, aten.clone.default):
        u = _unwrap(None, args, kwargs, False)
        if func is aten._to_copy.default:
            u.kwargs["device"] = torch.device("cpu")
        res = func(*u.args, **u.kwargs)
        if info.kind == VIEW:
            src = u.sims[0]
            return SimTensor(res, src._dev, src._alloc)
        return res.clone() if isinstance(res, torch.Tensor) else res
    raise SimulationError(f"{func} on a simulated CUDA tensor outside simdist.run(): "
                          "tensors returned by a run are converted to CPU tensors; keep using those")


def dispatch(rs, func, args, kwargs):
    info = _INFO.get(func)
    if info is None:
        info = op_info(func)
    if info.special is not None:
        return info.special(rs, func, args, kwargs)
    kind = info.kind
    if kind is VIEW:
        return _view(rs, func, info, args, kwargs)
    if kind is INPLACE:
        return _inplace(rs, func, info, args, kwargs)
    if kind is FUNCTIONAL:
        return _functional(rs, func, info, args, kwargs)
    return _host_read(rs, func, info, args, kwargs)


def _view(rs, func, info, args, kwargs):
    u = _unwrap(rs, args, kwargs, False)
    res = func(*u.args, **u.kwargs)
    src = u.sims[0]
    dev, alloc = src._dev, src._alloc
    if isinstance(res, torch.Tensor):
        return SimTensor(res, dev, alloc)
    return type(res)(SimTensor(r, dev, alloc) for r in res)


def _with_generator(info, u, dev):
    """Random ops take their (seed, offset) at launch, as CUDA's Philox does (simdist.rng)."""
    if info.has_generator:
        u.kwargs["generator"] = rng.generator_for(rng.launch_seed(u.kwargs.get("generator") or dev.generator))


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


def _inplace(rs, func, info, args, kwargs):
    u = _unwrap(rs, args, kwargs, False)
    dev = u.dev
    if dev is None:
        return func(*args, **kwargs)
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
    _with_generator(info, u, dev)
    seed = _random_seed(info, dev)
    fa, fk = u.args, u.kwargs
    stream = rs.current_stream(dev.index)

    def fn():
        _run_random(seed, lambda: func(*fa, **fk))

    nbytes = _nbytes(u.sims)
    reads = u.sims
    if info.name.split(".")[0] in _WRITE_ONLY:  # fill_, zero_, random fills: they never read what they overwrite
        reads = [x for x in u.sims if not _in(x, writes)]
    launch(rs, stream, info.name, "kernel", fn, reads, writes, nbytes, skip=5)
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


_WRITE_ONLY = frozenset(("fill_", "zero_", "uniform_", "normal_", "bernoulli_", "random_", "exponential_",
                         "geometric_", "log_normal_", "cauchy_"))


def _sim_of(a):
    return a._sim if type(a) is HostProxy else a


def _functional(rs, func, info, args, kwargs):
    u = _unwrap(rs, args, kwargs, True)
    dev = u.dev
    if dev is None:
        return func(*args, **kwargs)
    if kwargs and kwargs.get("device") is not None:  # new_zeros(..., device=cuda:0) as autograd's C++ calls it
        if torch.device(kwargs["device"]).type == "cuda":
            u.kwargs["device"] = torch.device("cpu")
    try:
        specs, is_seq = _out_specs(func, args, kwargs, u.key)
    except NotImplementedError:  # data-dependent output size or no meta kernel: compute it synchronously
        return _sync_compute(rs, func, info, u)
    except Exception:  # noqa: BLE001
        # a shape/dtype error in the program raises here, at the call, as torch would; if the real op
        # accepts the arguments the meta kernel was the problem, and the op runs synchronously
        func(*u.args, **u.kwargs)
        return _sync_compute(rs, func, info, u)
    stream = rs.current_stream(dev.index)
    outs = [allocate(dev, stream, *s) if s is not None else None for s in specs]
    if (not kwargs and not is_seq and info.out_variant is not None and not info.random and specs[0] is not None
            and not u.cpu_tensors and u.key is not None):
        _FAST_SPECS[(id(func), *u.key)] = specs[0]  # later calls with this signature take _fast_functional
    if info.has_generator:
        _with_generator(info, u, dev)
    seed = _random_seed(info, dev) if info.random else None
    fa, fk = u.args, u.kwargs
    ov = info.out_variant
    if ov is not None and not is_seq and outs[0] is not None and not info.random:
        oi = outs[0]._inner

        def fn():
            ov(*fa, **fk, out=oi)
    else:
        inners = [o._inner if o is not None else None for o in outs]

        def fn():
            res = _run_random(seed, lambda: func(*fa, **fk))
            if not is_seq:
                res = (res,)
            for o, r in zip(inners, res):
                if o is not None:
                    o.copy_(r)

    real_outs = [o for o in outs if o is not None]
    nbytes = _nbytes(u.sims)
    for o in real_outs:
        nbytes += o._alloc.nbytes
    reads = u.sims if info.reads_data else ()
    launch(rs, stream, info.name, "kernel", fn, reads, real_outs, nbytes,
           _flops(info.name, u.sims, real_outs) if info.name in _MM else 0, skip=5)
    if is_seq:
        return tuple(outs) if isinstance(specs, list) else outs
    return outs[0]


_FAST_SPECS: dict = {}
_MISS = object()


def _fast_functional(rs, info, args):
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
    if dev is None or dev.rank != rs.rank:
        return _MISS
    spec = _FAST_SPECS.get(tuple(key))
    if spec is None:
        return _MISS
    stream = rs.current_streams.get(dev.index)
    if stream is None:
        stream = dev.default_stream
    out = allocate(dev, stream, *spec)
    nbytes += out._alloc.nbytes
    launch(rs, stream, info.name, "kernel", partial(info.out_op, *cargs, out=out._inner), sims, (out,),
           nbytes, _flops(info.name, sims, (out,)) if info.name in _MM else 0, skip=4)
    return out


def _sync_compute(rs, func, info, u):
    """Ops whose output size depends on the data (nonzero, masked_select, unique...).

    On a GPU these synchronize the host with the current stream, so here the
    host waits for the op, then places the result in fresh device memory.
    """
    dev = u.dev
    stream = rs.current_stream(dev.index)
    holder = []
    fa, fk = u.args, u.kwargs
    _with_generator(info, u, dev)
    op = launch(rs, stream, info.name, "kernel", lambda: holder.append(func(*fa, **fk)), u.sims, [],
                _nbytes(u.sims))
    rs.wait_op(op, f"{info.name} (data-dependent output size)")
    res = holder[0]
    seq = isinstance(res, (tuple, list))
    outs = []
    for r in (res if seq else (res,)):
        if r is None:
            outs.append(None)
            continue
        o = allocate_like_contiguous(dev, stream, r.shape, r.dtype)
        o._inner.copy_(r)
        rs.world.shadow.access(op, o._inner, o._alloc, True)
        outs.append(o)
    return tuple(outs) if seq else outs[0]


def _host_read(rs, func, info, args, kwargs):
    """Ops that return Python values (equal, is_nonzero...): the host waits for the result."""
    u = _unwrap(rs, args, kwargs, False)
    dev = u.dev
    if dev is None:
        return func(*args, **kwargs)
    holder = []
    fa, fk = u.args, u.kwargs
    stream = rs.current_stream(dev.index)
    op = launch(rs, stream, info.name, "d2h", lambda: holder.append(func(*fa, **fk)), u.sims, [],
                _nbytes(u.sims))
    rs.wait_op(op, info.name)
    return holder[0]


# --- factories ---------------------------------------------------------------------
_EMPTY = {aten.empty.memory_format, aten.empty_strided.default}  # allocation only: fresh memory keeps its bytes


def _poisoned_host(shape, dtype):
    t = torch.empty(shape, dtype=dtype)
    if t.numel():
        t.view(-1).view(torch.uint8).fill_(0xFF) if t.is_contiguous() else None
    return t


def _factory_device(rs, dev):
    idx = dev.index if dev.index is not None else rs.current_device
    return rs.device(idx)


def factory(rs, func, args, kwargs, tdev):
    dev = _factory_device(rs, tdev)
    mkw = dict(kwargs)
    mkw["device"] = "meta"
    mkw.pop("pin_memory", None)
    if "generator" in mkw:
        mkw["generator"] = None  # a CPU generator cannot drive a meta kernel; shapes do not depend on it
    try:
        res = func(*args, **mkw)
    except Exception as e:  # noqa: BLE001
        raise UnsupportedOperation(f"simdist cannot create {func} on a simulated device: {e}") from e
    stream = rs.current_stream(dev.index)
    out = allocate(dev, stream, tuple(res.shape), tuple(res.stride()), res.dtype)
    if func in _EMPTY:
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

    launch(rs, stream, info.name, "kernel", fn, (), (out,), _nbytes((out,)))
    return out


# --- special ops -------------------------------------------------------------------
@special(aten.empty_like.default, aten.new_empty.default, aten.new_empty_strided.default)
def _empty_like(rs, func, args, kwargs):
    u = _unwrap(rs, args, kwargs, False)
    dev = u.dev
    tdev = kwargs.get("device")
    if tdev is not None:
        tdev = torch.device(tdev)
        if tdev.type != "cuda":  # e.g. torch.empty_like(cuda_tensor, device="cpu"): plain host memory
            shape = args[0].shape if func is aten.empty_like.default else args[1]
            return torch.empty(shape, dtype=kwargs.get("dtype") or args[0].dtype, device=tdev)
        dev = _factory_device(rs, tdev)
    margs = tuple(_to_meta(a) for a in args)
    mk = {k: _to_meta(v) for k, v in kwargs.items()}
    mk["device"] = "meta"
    mk.pop("pin_memory", None)
    res = func(*margs, **mk)
    return allocate(dev, rs.current_stream(dev.index), tuple(res.shape), tuple(res.stride()), res.dtype)


@special(aten.lift_fresh.default, aten.lift_fresh_copy.default)
def _lift(rs, func, args, kwargs):
    return args[0]


@special(aten._to_copy.default)
def _to_copy(rs, func, args, kwargs):
    src = args[0]
    tdev = kwargs.get("device")
    tdev = torch.device(tdev) if tdev is not None else None
    dtype = kwargs.get("dtype") or src.dtype
    src_sim = type(src) in (SimTensor, HostProxy)
    if src_sim:
        src = _sim_of(src)
        if src._dev.rank != rs.rank:
            raise SimulationError(f"rank {rs.rank} used a tensor that lives on rank {src._dev.rank}")
    if src_sim and (tdev is None or tdev.type == "cuda"):
        dst_dev = src._dev if tdev is None or tdev.index is None or tdev.index == src._dev.index \
            else rs.device(tdev.index)
        ck = {k: v for k, v in kwargs.items() if k not in ("device", "non_blocking", "pin_memory")}
        ck["dtype"] = dtype
        meta = aten._to_copy.default(_to_meta(src), **ck)
        stream = rs.current_stream(dst_dev.index)
        out = allocate(dst_dev, stream, tuple(meta.shape), tuple(meta.stride()), meta.dtype)
        si, oi = src._inner, out._inner
        _device_copy(rs, src, out, lambda: oi.copy_(si), "_to_copy")
        return out
    if src_sim and kwargs.get("non_blocking"):
        # PyTorch pins the output of a non-blocking device-to-host copy, so the copy is truly asynchronous:
        # the host gets the tensor at once and must synchronize before reading it
        return _d2h_async(rs, src, rs.world.host_reads.pin(_poisoned_host(tuple(src.shape), dtype)))
    if src_sim:  # device -> host: the host waits for the copy on the current stream
        holder = []
        si = src._inner
        op = launch(rs, rs.current_stream(src._dev.index), "copy_d2h", "d2h",
                    lambda: holder.append(si.to(dtype=dtype, copy=True)), (src,), (), _nbytes((src,)))
        rs.wait_op(op, "device-to-host copy")
        res = holder[0]
        mf = kwargs.get("memory_format")
        if mf is not None and mf != torch.preserve_format:
            res = res.contiguous(memory_format=mf)
        return res
    dev = _factory_device(rs, tdev)
    stream = rs.current_stream(dev.index)
    hr = rs.world.host_reads
    if kwargs.get("non_blocking") and hr.is_pinned(src):
        # host -> device from pinned memory, non_blocking: the DMA reads the host buffer when it runs
        meta = torch.empty_like(src, dtype=dtype, device="meta")  # the layout _to_copy gives (preserve_format)
        return _h2d_async(rs, stream, allocate(dev, stream, tuple(meta.shape), tuple(meta.stride()), dtype), src)
    # host -> device from pageable memory: staged at launch (the host buffer is free on return), so snapshot now
    snap = src.to(dtype=dtype).clone()
    out = allocate(dev, stream, tuple(snap.shape), tuple(snap.stride()), snap.dtype)
    oi = out._inner
    launch(rs, stream, "copy_h2d", "h2d", lambda: oi.copy_(snap), (), (out,), _nbytes((out,)))
    return out


def _h2d_async(rs, stream, dst, src):
    """A non_blocking copy from pinned host memory: the DMA reads the host buffer when it runs, so a host write
    to `src` before the host has waited for it is a race (HostReads.check_writes)."""
    di = dst._inner
    op = launch(rs, stream, "copy_h2d_async", "h2d", lambda: di.copy_(src), (), (dst,), _nbytes((dst,)))
    rs.world.host_reads.pending_source(op, src)
    return dst


def _d2h_async(rs, src, dst):
    """A non_blocking copy into pinned host memory: the host has `dst` at once and must wait before reading it
    (HostReads.check)."""
    si = src._inner
    op = launch(rs, rs.current_stream(src._dev.index), "copy_d2h_async", "d2h", lambda: dst.copy_(si), (src,), (),
                _nbytes((src,)))
    rs.world.host_reads.pending(op, dst)
    return dst


def _device_copy(rs, src, dst, fn, name):
    """A device-to-device copy. Within one device: a kernel on its current stream. Across devices, as ATen's
    copy_device_to_device: the copy runs on the source device's current stream after it waits for the
    destination's current stream, and the destination's current stream then waits for the copy."""
    if src._dev is dst._dev:
        return launch(rs, rs.current_stream(dst._dev.index), name, "kernel", fn, (src,), (dst,),
                      _nbytes((src, dst)))
    host = rs.host
    s_stream, d_stream = rs.current_stream(src._dev.index), rs.current_stream(dst._dev.index)
    s_stream.wait_marker(host, d_stream.record_marker(host))
    op = launch(rs, s_stream, name, "copy", fn, (src,), (dst,), _nbytes((src, dst)))
    d_stream.wait_marker(host, s_stream.record_marker(host))
    return op


@special(aten.copy_.default)
def _copy_(rs, func, args, kwargs):
    dst, src = args[0], args[1]
    dst_sim = type(dst) in (SimTensor, HostProxy)
    src_sim = type(src) in (SimTensor, HostProxy)
    if dst_sim and src_sim:
        d, s = _sim_of(dst), _sim_of(src)
        for t in (d, s):
            if t._dev.rank != rs.rank:
                raise SimulationError(f"rank {rs.rank} used a tensor that lives on rank {t._dev.rank}")
        di, si = d._inner, s._inner
        _device_copy(rs, s, d, lambda: di.copy_(si), "copy_")
        return dst
    if dst_sim:  # host -> device into existing memory
        d = _sim_of(dst)
        di = d._inner
        hr = rs.world.host_reads
        if (len(args) > 2 and args[2] or kwargs.get("non_blocking")) and isinstance(src, torch.Tensor) \
                and hr.is_pinned(src):
            _h2d_async(rs, rs.current_stream(d._dev.index), d, src)
            return dst
        snap = src.clone() if isinstance(src, torch.Tensor) else torch.tensor(src)
        launch(rs, rs.current_stream(d._dev.index), "copy_h2d", "h2d", lambda: di.copy_(snap), (), (d,),
               _nbytes((d,)))
        return dst
    # device -> host
    s = _sim_of(src)
    # non_blocking only makes a device-to-host copy asynchronous into page-locked memory: into pageable
    # memory cudaMemcpyAsync returns once the copy is done (CUDA Runtime API, "API synchronization behavior")
    if (len(args) > 2 and args[2] or kwargs.get("non_blocking")) and rs.world.host_reads.is_pinned(dst):
        return _d2h_async(rs, s, dst)
    holder = []
    si = s._inner
    op = launch(rs, rs.current_stream(s._dev.index), "copy_d2h", "d2h", lambda: holder.append(si.clone()), (s,),
                (), _nbytes((s,)))
    rs.wait_op(op, "device-to-host copy")
    dst.copy_(holder[0])
    return dst


@special(aten._local_scalar_dense.default)
def _item(rs, func, args, kwargs):
    s = _sim_of(args[0])
    holder = []
    si = s._inner
    op = launch(rs, rs.current_stream(s._dev.index), "item", "d2h", lambda: holder.append(si.item()), (s,), (),
                _nbytes((s,)))
    rs.wait_op(op, ".item()")
    return holder[0]


@special(aten.record_stream.default)
def _record_stream(rs, func, args, kwargs):
    from .cuda_api import record_stream
    record_stream(_sim_of(args[0]), args[1])


@special(aten.is_pinned.default)
def _is_pinned(rs, func, args, kwargs):
    return False


_INPLACE_VIEWS = {}
for _name, _ovs in (("as_strided_", ("default",)), ("t_", ("default",)), ("unsqueeze_", ("default",)),
                    ("squeeze_", ("default", "dim", "dims")), ("transpose_", ("default",)),
                    ("swapdims_", ("default",)), ("swapaxes_", ("default",)), ("detach_", ("default",))):
    _pk, _base = getattr(aten, _name, None), getattr(aten, _name[:-1], None)
    for _ov in _ovs:
        _bov = "int" if _name == "transpose_" else _ov  # aten.transpose's overload is named .int
        if _pk is not None and _base is not None and hasattr(_pk, _ov) and hasattr(_base, _bov):
            _INPLACE_VIEWS[getattr(_pk, _ov)] = getattr(_base, _bov)


def _inplace_view(rs, func, args, kwargs):
    """x.t_(), x.unsqueeze_(0)...: metadata changes on the host, at once; no device work, no bytes touched."""
    x = _sim_of(args[0])
    u = _unwrap(rs, args, kwargs, False)
    _set_view(x, _INPLACE_VIEWS[func](*u.args, **u.kwargs))
    return args[0]


def _set_view(x, res):
    """Give simulated tensor x the sizes/strides/offset of `res` (a CPU view of its bytes) in place, keeping the
    Python object, as torch's in-place metadata ops do."""
    y = SimTensor(res, x._dev, x._alloc)
    x.data = y
    x._inner = res
    x._spec = y._spec
    x._span = None


for _f in _INPLACE_VIEWS:
    _SPECIAL[_f] = _inplace_view


def _resize(rs, func, args, kwargs):
    """x.resize_(shape) within the bytes x's allocation already has: a metadata change (contiguous strides
    from x's storage offset). Growing beyond them would reallocate and copy, which is not modelled."""
    x = _sim_of(args[0])
    shape = tuple(args[1] if len(args) > 1 else kwargs["size"])
    if kwargs.get("memory_format") not in (None, torch.contiguous_format):
        raise UnsupportedOperation(f"resize_ with memory_format={kwargs['memory_format']} is not modelled")
    inner = x._inner
    n = 1
    for d in shape:
        n *= d
    isz = inner.element_size()
    base = x._alloc.block.offset // isz if x._alloc.block is not None else 0
    avail = x._alloc.nbytes // isz - (inner.storage_offset() - base) if x._alloc.block is not None else 0
    if n > avail:
        raise UnsupportedOperation(f"resize_ of a simulated CUDA tensor to {list(shape)} ({n} elements) grows "
                                   f"it past its allocation ({avail} elements): not modelled by simdist")
    stride = torch._prims_common.make_contiguous_strides_for(shape) if shape else ()
    _set_view(x, inner.as_strided(shape, stride, inner.storage_offset()))
    return args[0]


_SPECIAL[aten.resize_.default] = _resize


def _unsupported_collective(rs, func, args, kwargs):
    raise UnsupportedOperation(f"{func}: functional / C++ c10d collectives are not modelled by simdist; use the "
                               "torch.distributed API (dist.all_reduce, dist.all_gather_into_tensor, ...)")


def _unsupported(rs, func, args, kwargs):
    raise UnsupportedOperation(f"{func} on a simulated CUDA tensor is not modelled by simdist")


for _f in (aten.set_.source_Storage, aten.set_.source_Storage_storage_offset, aten.set_.source_Tensor,
           aten._pin_memory.default):
    _SPECIAL[_f] = _unsupported
