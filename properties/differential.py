"""The differential tier: straight-line programs of tensor ops, drawn by Hypothesis, run on simulated CUDA and
eagerly on the CPU; both must give the same values, bit for bit.

A program (`Program`) is Python source, a function of a device string: `prog("cuda")` under `simdist.run` and
`prog("cpu")` eagerly run the same text. It returns a list of `(step, value)` pairs: CPU copies of tensors
(`snap`), their metadata (`meta`: shape, strides, storage offset, dtype, storage size, data_ptr offset, version
counter, autograd flags), Python values (`item`, `tolist`), and at the end the state of every live tensor,
module and optimizer with the aliasing structure (which variables share a storage, which are one object).

Every program is valid by construction: `programs()` draws one step at a time and runs it at once on a CPU
shadow of the program; a step that eager torch rejects is dropped. What a CPU shadow cannot see is where a
tensor lives on a GPU, so the builder keeps that itself: device tensors `t*`, host tensors `h*`, modules `m*`
(placed on the host or the device), optimizers `o*`; steps mix the two sides only where a GPU allows it
(copies, 0-d CPU scalars, torch.tensor of device scalars). Eager CPU aliases what a GPU copies
(`t.cpu()` of a CPU tensor is the tensor itself), so a host tensor moved to the device is never used again and
a device tensor read back to the host is captured at once. Programs never read memory they did not write
(fresh device memory is poison under simdist, garbage on the CPU), never use device random generators
(a GPU's Philox stream is not the CPU's) and pass foreach= / fused= to optimizers (their defaults differ by
device; each path is the same code on both sides when named).

Steps are drawn from `OPS` (name -> Op: category, the API names it uses, its generator). `check(prog)` runs a
program both ways and raises `PropertyFailure` on any difference, on any hazard report (these programs are
correctly synchronized: a hazard is a false report), and on any exception but `simdist.UnsupportedOperation`,
which it returns as a `Refusal` when its message names an API of the step that raised it.

Values are compared bit for bit: the same CPU kernels run on both sides, and the eager run uses one intra-op
thread, as simdist's kernels do (reductions split across threads round differently). What is not compared,
because a GPU and the CPU side legitimately differ there, is left out by name:
- strides of dims of size 1 and of tensors without elements (they address no memory);
- the version counter of tensors a foreach op wrote (CUDA's fused kernel counts none, the CPU kernel's loop
  over per-tensor ops counts each) and of module buffers (Module._apply replaces a buffer by what `.to()`
  returns: a new tensor on a GPU, the same one on the CPU);
- anything an alias on the CPU side would change: `.cpu()` / `.to("cpu")` of a CPU tensor is the tensor
  itself, so host tensors moved to the device are never used again, modules whose parameters view a flat
  buffer are not moved again, and `.cpu(memory_format=...)` is not drawn.
Besides views, storage tricks, casts, modules and optimizers, the table draws what training and inference code
does around them: advanced indexing and index_put_ / index_add_ / scatter_reduce_ with duplicate indices (one of
the values a GPU may keep: the CPU's), boolean masks, sort / topk / argsort (stable) / kthvalue / unique /
searchsorted / bucketize / repeat_interleave, losses in every reduction with their gradients, embedding with
padding_idx / max_norm (the weight renormalized in place) and embedding_bag, integer division in each rounding
mode, fp16 / bf16 reductions, in-place writes through expanded or overlapping views and view-vs-reshape after a
transpose (the same exception type as eager, at the call, or none), `t.to(t.dtype) is t` and the like, copy_
across dtypes. What a GPU does differently from eager CPU is not drawn and is checked by fixed tests against an
H200's answers instead (integer division by zero, integer matmuls, unique's layouts, self-overlapping in-place
writes, 0-dim host tensors where CUDA wrappers check devices). `random_programs()` / `check_random` test the
random number generators for reproducibility, not values (below).

Known differences of simdist, each with an xfail test in tests/test_differential.py, are not drawn: argument
errors only a kernel raises (in-place ops, mm of mixed dtypes) surface when it runs, not at the call; a view of
a tensor autograd tracks is replayed with its own op, not as_strided, after an in-place metadata op on its base;
a gradient with several contributions is accumulated out of place (its version counter: losses copy theirs).
"""
from __future__ import annotations

import contextlib
import copy
import hashlib
import linecache
import math
import re
import struct
import traceback
import warnings
from dataclasses import dataclass, field

import torch
from hypothesis import strategies as st

from .checks import PropertyFailure

__all__ = ["programs", "Program", "OPS", "check", "Refusal", "snap", "meta", "sync", "cuda", "pin", "side",
           "rec", "gen", "final", "canon", "first_difference", "run_both"]


# --- helpers the programs call: one text, both devices ----------------------------------------------------------
def gen(seed):
    """A seeded CPU generator (device generators differ between a GPU and the CPU by design)."""
    return torch.Generator().manual_seed(seed)


def snap(t):
    """A host copy of a tensor's values (never an alias: on the CPU, `.cpu()` returns the tensor itself)."""
    return t.detach().to("cpu", copy=True)


def meta(t):
    """What user code can see of a tensor's layout and identity, device aside."""
    s = t.untyped_storage()
    cl = t.is_contiguous(memory_format=torch.channels_last) if t.dim() == 4 else None
    return {"shape": tuple(t.shape), "stride": _strides(t), "storage_offset": t.storage_offset(), "dtype": t.dtype,
            "contiguous": t.is_contiguous(), "channels_last": cl, "storage_nbytes": s.nbytes(),
            "data_ptr - storage": t.data_ptr() - s.data_ptr() if t.numel() else t.data_ptr(), "version": t._version,
            "requires_grad": t.requires_grad, "is_view": t._is_view()}
    # (not is_leaf: reading a view's grad_fn regenerates it, which under simdist replays the view op and can fail
    # where a GPU replays as_strided: tests/test_differential.py test_known_view_replay)


def sync(dev):
    if dev == "cuda":
        torch.cuda.synchronize()


def cuda(x, dev, **kwargs):
    """`x.cuda()` (a tensor or a module) on the GPU side; the CPU side stays put."""
    return x.cuda(**kwargs) if dev == "cuda" else x


def pin(h, dev):
    """Page-locked host memory on the GPU side (a CPU-only torch cannot pin); a plain copy on the CPU side."""
    return h.pin_memory() if dev == "cuda" else h.clone()


@contextlib.contextmanager
def side(dev):
    """Work on a side stream, ordered both ways with the current stream (the CPU side has no streams)."""
    if dev != "cuda":
        yield
        return
    cur = torch.cuda.current_stream()
    s = torch.cuda.Stream()
    s.wait_stream(cur)
    with torch.cuda.stream(s):
        yield
    cur.wait_stream(s)


def rec(t, dev):
    """`t.record_stream(current stream)`: t was made on a side stream and is used on the current one."""
    if dev == "cuda":
        t.record_stream(torch.cuda.current_stream())


def final(dev, tensors, modules=(), optimizers=()):
    """The end state: every tensor (placement, metadata, values), every module's parameters and buffers (placement,
    tags, object identity, values, gradients), every optimizer's state, and the aliasing structure."""
    out = {}
    objs = list(tensors.items())
    for name, t in objs:
        on_dev = t.is_cuda if dev == "cuda" else name.startswith("t")
        out[name] = {"on device": on_dev, "meta": meta(t), "values": snap(t)}
    for name, (m, placed, kept, tags, foreach) in dict(modules).items():
        buffers = {n for n, _ in m.named_buffers()}
        for pn, p in list(m.named_parameters()) + list(m.named_buffers()):
            on_dev = p.is_cuda if dev == "cuda" else placed == "dev"
            g = None if getattr(p, "grad", None) is None else {"meta": meta(p.grad), "values": snap(p.grad)}
            mt = meta(p)
            if pn in buffers:  # Module._apply replaces a buffer by what .to() returns: on the CPU side that is
                del mt["version"]  # the same tensor, on a GPU a new one (version 0): not comparable
            elif foreach:  # a foreach op counts in no version; the CPU kernel loops over per-tensor ops that each
                del mt["version"]  # do, CUDA's fused kernel does not (its per-tensor fallback would): not comparable
                if g is not None:
                    del g["meta"]["version"]
            out[f"{name}.{pn}"] = {"on device": on_dev, "parameter": isinstance(p, torch.nn.Parameter), "meta": mt,
                                   "values": snap(p), "grad": g, "tags": {k: getattr(p, k, None) for k in tags}}
        for pn, k in kept.items():
            out[f"{name}.{pn} kept"] = k is m.get_parameter(pn)
    for name, o in dict(optimizers).items():
        for gi, group in enumerate(o.param_groups):
            for pi, p in enumerate(group["params"]):
                for k, v in sorted(o.state.get(p, {}).items()):
                    out[f"{name} group {gi} param {pi} {k}"] = snap(v) if isinstance(v, torch.Tensor) else v
    ptrs, alias, same = [], [], []
    for name, t in objs:
        p = (t.untyped_storage().data_ptr(), t.untyped_storage().nbytes())
        if not p[1]:
            p = ("empty storage", name)  # no bytes, no address: shared with nothing
        alias.append(ptrs.index(p) if p in ptrs else len(ptrs))
        ptrs.append(p)
        same.append(next(i for i, (n2, t2) in enumerate(objs) if t2 is t))
    out["storages shared (first variable with the same storage)"] = alias
    out["objects shared (first variable that is the same object)"] = same
    return out


# --- canonical values and their comparison ----------------------------------------------------------------------
def canon(v):
    """A value with every float as its bits and every tensor as (dtype, shape, strides, bytes)."""
    if isinstance(v, torch.Tensor):
        t = v.detach()
        if t.is_cuda or type(t) is not torch.Tensor:
            return ("not a plain CPU tensor", type(t).__name__, str(t.device))
        return ("tensor", str(t.dtype), tuple(t.shape), _strides(t), _bytes(t))
    if isinstance(v, float):
        return ("float", struct.pack("<d", v))
    if isinstance(v, bool):
        return ("bool", v)
    if isinstance(v, int):
        return ("int", v)
    if isinstance(v, (list, tuple)):
        return (type(v).__name__, tuple(canon(x) for x in v))
    if isinstance(v, dict):
        return ("dict", tuple((k, canon(x)) for k, x in v.items()))
    if isinstance(v, (torch.dtype, torch.Size, str, type(None))):
        return (type(v).__name__, str(v))
    return ("other", type(v).__name__, repr(v))


def _strides(t):
    """Strides of the dims that address memory (a dim of size 1 never steps, torch ignores its stride; a tensor
    without elements addresses nothing)."""
    if t.numel() == 0:
        return tuple(None for _ in t.shape)
    return tuple(st_ if n > 1 else None for n, st_ in zip(t.shape, t.stride()))


def _bytes(t):
    if not t.numel():
        return ()
    dense = torch.empty(tuple(t.shape), dtype=t.dtype)  # truly row-major, whatever t's strides
    dense.copy_(t)
    return tuple(dense.reshape(-1).view(torch.uint8).tolist())


def first_difference(a, b, path=""):
    """(path, a's value, b's value) where two outputs first differ (by canon), or None."""
    if canon(a) == canon(b):
        return None
    if isinstance(a, dict) and isinstance(b, dict) and list(a) == list(b):
        for k in a:
            d = first_difference(a[k], b[k], f"{path}[{k!r}]")
            if d is not None:
                return d
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            d = first_difference(x, y, f"{path}[{i}]")
            if d is not None:
                return d
    return path, a, b


def _short(v, n=600):
    if isinstance(v, torch.Tensor):
        s = f"{v.dtype}{list(v.shape)} stride {v.stride()} {v.tolist()!r}"
    else:
        s = repr(v)
    return s if len(s) <= n else s[:n] + "..."


# --- programs --------------------------------------------------------------------------------------------------
_NS = {"torch": torch, "snap": snap, "meta": meta, "sync": sync, "cuda": cuda, "pin": pin, "side": side,
       "gen": gen, "final": final, "rec": rec}
_HEADER = ("from simdist.properties.differential import cuda, final, gen, meta, pin, rec, side, snap, sync\n"
           "import torch\n")


@dataclass
class Step:
    op: str
    code: str  # one or more lines, no indentation
    new: dict = field(default_factory=dict)  # variable -> kind
    drop: tuple = ()  # host tensors a GPU copied from and the CPU side now aliases: never used again
    after: object = None  # the builder's bookkeeping, done once the step is accepted


class Program:
    """A drawn program: `prog(dev)` runs it; `str(prog)` is its source (paste it to reproduce)."""

    def __init__(self, steps, final_line):
        self.steps = list(steps)
        self.final_line = final_line
        body = ["def prog(dev):", "    out = []"]
        self.line_step = {}  # line number in the source -> step index
        lineno = _HEADER.count("\n") + 3
        for i, s in enumerate(self.steps):
            body.append(f"    # step {i}: {s.op}")
            lineno += 1
            for ln in s.code.splitlines():
                body.append("    " + ln)
                self.line_step[lineno] = i
                lineno += 1
        body.append("    " + final_line)
        body.append("    return out")
        self.source = _HEADER + "\n".join(body) + "\n"
        digest = hashlib.sha1(self.source.encode()).hexdigest()[:12]
        self.filename = f"<simdist-differential-{digest}>"
        linecache.cache[self.filename] = (len(self.source), None, self.source.splitlines(True), self.filename)
        ns = dict(_NS)
        exec(compile(self.source, self.filename, "exec"), ns)
        self._fn = ns["prog"]
        self.__name__ = "prog"
        self.__qualname__ = "prog"
        self.__module__ = __name__

    def __call__(self, dev):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return self._fn(dev)

    def __repr__(self):
        return self.source

    def step_of(self, exc):
        """The step whose line raised `exc` (the innermost frame in the program's source), or None."""
        for fr in reversed(traceback.extract_tb(exc.__traceback__)):
            if fr.filename == self.filename:
                return self.line_step.get(fr.lineno)
        return None


# --- the builder: draws steps against a CPU shadow of the program ----------------------------------------------
MAX_NUMEL = 256
MAX_NBYTES = 4096

FLOATS = (torch.float32, torch.bfloat16, torch.float16)
INTS = (torch.int32, torch.int64)
DTYPES = FLOATS + INTS + (torch.bool, torch.float8_e4m3fn, torch.float64, torch.uint8, torch.int8,
                          torch.float8_e5m2)
_DT = {d: "torch." + str(d).split(".")[1] for d in DTYPES}


def _dt(d):
    return _DT[d]


def _shares_elements(t):
    if not isinstance(t, torch.Tensor) or t.numel() < 2 or any(st == 0 and n > 1 for n, st in zip(t.shape, t.stride())):
        return False
    if t.is_contiguous():
        return False
    idx = torch.zeros((), dtype=torch.int64)
    for n, st in zip(t.shape, t.stride()):
        idx = idx.unsqueeze(-1) + torch.arange(n) * st
    return idx.unique().numel() < t.numel()


class _GpuRefusals(torch.utils._python_dispatch.TorchDispatchMode):
    """The shadow's ops, refused where a GPU's kernel lacks the dtype and the CPU's computes it (uint16 / float8
    mul, abs, roll, sort, any...: simdist refuses them as the GPU does): such a step is not drawn."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        from simdist.faces.rules.cuda_dtypes import gpu_refusal
        out = func(*args, **(kwargs or {}))
        first = out[0] if isinstance(out, (tuple, list)) and out else out
        err = gpu_refusal(func, args, first.dtype if isinstance(first, torch.Tensor) else None)
        if err is not None:
            raise err
        return out


class _Builder:
    def __init__(self, draw):
        self.draw = draw
        self.steps = []
        self.kinds = {}  # variable -> "dev" | "host" | "mod" | "opt"
        self.mods = {}  # module variable -> {"placed": dev/host, "kept": {param: var}, "tags": [...], "opts": [...]}
        self.opts = {}  # optimizer variable -> {"module": m, "stateful": bool}
        self.counter = 0
        self.history = []  # the bookkeeping before each accepted step (truncate)
        # variables whose storage may hold bytes never written (a data-dependent op's storage is sized for every
        # input element): no storage trick reads past their views; every variable a step touching one names
        # joins them (conservative)
        self.holey = set()
        self._fresh_ns()

    # shadow
    def _fresh_ns(self):
        self.ns = dict(_NS, dev="cpu", out=[])

    def _exec(self, code):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            exec(compile(code, "<shadow>", "exec"), self.ns)

    def rebuild(self):
        self._fresh_ns()
        for s in self.steps:
            self._exec(s.code)

    def try_step(self, step):
        if step is None:
            return False
        try:
            with _GpuRefusals():
                self._exec(step.code)
            ok = all(self._sane(n) for n in step.new) and not any(self._lost(n) for n in self.live())
        except Exception:  # noqa: BLE001 - eager torch rejects the step (or the builder's limits do): drop it
            ok = False
        if not ok:
            self.rebuild()
            return False
        self.history.append(copy.deepcopy((self.kinds, self.mods, self.opts, self.holey)))
        self.steps.append(step)
        for n in step.drop:
            self.kinds.pop(n, None)
        self.kinds.update(step.new)
        if step.after is not None:
            step.after()
        named = set(re.findall(r"\b[th]\d+\b", step.code))
        if named & self.holey:
            self.holey |= named
        return True

    def truncate(self, i):
        """Forget step i and every later one."""
        self.steps = self.steps[:i]
        self.kinds, self.mods, self.opts, self.holey = self.history[i]
        self.history = self.history[:i]
        self.rebuild()

    def finish(self):
        """The program, replayed from scratch on the CPU as the tier will run it: steps are dropped from the one
        it fails at (its end state unreadable, or a step that passed on the shadow only: reading a view's
        autograd state (is_leaf, detach) there regenerates its grad_fn, which changes what a later in-place op
        on it may do)."""
        while True:
            prog = Program(self.steps, _final_line(self))
            try:
                prog("cpu")
                return prog
            except Exception as e:  # noqa: BLE001
                if not self.steps:
                    raise AssertionError(f"differential builder: an empty program fails: {e}") from e
                i = prog.step_of(e)
                self.truncate(len(self.steps) - 1 if i is None else i)

    def _sane(self, name):
        v = self.ns.get(name)
        if isinstance(v, torch.Tensor):
            return v.numel() <= MAX_NUMEL and v.untyped_storage().nbytes() <= MAX_NBYTES
        return v is not None

    def _lost(self, name):
        """A live tensor whose storage no longer holds what it views (resized away): never left behind."""
        v = self.ns.get(name)
        if not isinstance(v, torch.Tensor) or v.numel() == 0:
            return False
        ext = 1 + sum((s - 1) * st for s, st in zip(v.shape, v.stride()))
        return (v.storage_offset() + ext) * v.element_size() > v.untyped_storage().nbytes()

    def live(self):
        return list(self.kinds)

    # drawing
    def name(self, prefix):
        self.counter += 1
        return f"{prefix}{self.counter}"

    def pick(self, kind, pred=None, whole=False):
        # (never a view whose elements share memory without a zero stride, from unfold / as_strided: an in-place
        # op through it reads before it writes on a GPU, not in the CPU loop; tests/test_differential.py
        # test_an_in_place_op_through_a_self_overlapping_view_reads_before_it_writes)
        names = [n for n, k in self.kinds.items() if k == kind and (pred is None or pred(self.ns[n]))
                 and not (whole and n in self.holey) and not _shares_elements(self.ns[n])]
        if not names:
            return None
        return self.draw(st.sampled_from(names))

    def t(self, name):
        return self.ns[name]

    def integers(self, lo, hi):
        return self.draw(st.integers(lo, hi))

    def choice(self, seq):
        return self.draw(st.sampled_from(list(seq)))

    def boolean(self):
        return self.draw(st.booleans())

    def seed(self):
        return self.integers(0, 999)

    def shape(self, min_dims=0, max_dims=3, min_size=1, max_size=4):
        n = self.integers(min_dims, max_dims)
        return tuple(self.integers(min_size, max_size) for _ in range(n))

    def dtype(self, options=DTYPES):
        return self.choice(options)

    def scalar(self, dtype):
        if dtype == torch.bool:
            return self.choice(["True", "False"])
        if dtype.is_floating_point:
            return self.choice(["0.5", "-1.25", "2.0", "3.0", "0.0", "-0.0", "1e-3", "300.0", "float('nan')",
                                "float('inf')", "-7"])
        return self.choice(["0", "1", "-3", "7", "2"])

    def host_data(self, shape):
        """A deterministic host tensor expression of this shape."""
        k = self.seed()
        form = self.choice(["normal", "wide", "int", "bool", "special"])
        s = repr(tuple(shape))
        if form == "normal":
            return f"torch.randn({s}, generator=gen({k}))"
        if form == "wide":
            return f"(torch.randn({s}, generator=gen({k})) * 300)"
        if form == "int":
            return f"torch.randint(-8, 9, {s}, generator=gen({k}))"
        if form == "bool":
            return f"(torch.randn({s}, generator=gen({k})) > 0)"
        return (f"torch.tensor([0.0, -0.0, 1.0, float('nan'), float('inf'), -float('inf'), 1e-40, 65504.0, "
                f"-3.5, 448.0, 1e30])[torch.randint(0, 11, {s}, generator=gen({k}))].clone()")

    def to_dev(self, host_expr, dtype=None):
        """A host tensor expression moved to the device, by one of the ways user code does it."""
        forms = ["{h}.to(dev)", "cuda({h}, dev)", "torch.as_tensor({h}, device=dev)",
                 "{h}.to(dev, non_blocking=True)", "pin({h}, dev).to(dev, non_blocking=True)"]
        if dtype is not None:
            d = _dt(dtype)
            forms += [f"{{h}}.to(dev, {d})", f"{{h}}.to(device=dev, dtype={d}, non_blocking=True)",
                      f"{{h}}.to({d}).to(dev)", f"{{h}}.to(dev).to({d})"]
        return self.choice(forms).format(h=host_expr)

    def fresh_dev(self, shape, dtype=None):
        """A new device tensor expression of this shape (and dtype, when given)."""
        return self.to_dev(self.host_data(shape), dtype)

    def broadcastable_to(self, shape):
        """A shape that broadcasts to `shape` (drop leading dims, set some to 1)."""
        drop = self.integers(0, len(shape))
        return tuple(1 if self.boolean() else d for d in shape[drop:])

    def operand_for(self, x_name, to_shape=None):
        """A device tensor operand broadcastable with (or, given to_shape, to) the shape of x: a live one if one
        fits, else a fresh one."""
        x = self.t(x_name)
        target = tuple(x.shape) if to_shape is None else to_shape

        def fits(y):
            try:
                b = torch.broadcast_shapes(tuple(y.shape), target)
            except RuntimeError:
                return False
            return to_shape is None or tuple(b) == tuple(target)
        if self.boolean():
            y = self.pick("dev", fits)
            if y is not None:
                return y
        return "(" + self.fresh_dev(self.broadcastable_to(target), self.dtype(FLOATS + INTS + (torch.bool,))) + ")"


# --- the op table ---------------------------------------------------------------------------------------------
@dataclass
class Op:
    name: str
    category: str
    names: tuple  # the APIs the step calls: a refusal must name one of them
    make: object  # (builder) -> Step | None


OPS: dict = {}


def op(name, category, names):
    def deco(fn):
        OPS[name] = Op(name, category, tuple(names), fn)
        return fn
    return deco


def _dev(b, pred=None, whole=False):
    return b.pick("dev", pred, whole)


def _nonempty(t):
    return t.numel() > 0


def _float(t):
    return t.dtype.is_floating_point and t.dtype not in (torch.float8_e4m3fn, torch.float8_e5m2)


def _ordinary(t):
    return t.dtype not in (torch.float8_e4m3fn, torch.float8_e5m2)


# creation ------------------------------------------------------------------------------------------------------
@op("from_host", "creation", ("to", "cuda", "as_tensor", "pin_memory", "_to_copy", "copy_"))
def _from_host(b):
    n = b.name("t")
    shape = b.shape()
    dt = b.dtype() if b.boolean() else None
    return Step("from_host", f"{n} = {b.fresh_dev(shape, dt)}", {n: "dev"})


@op("factory", "creation", ("arange", "full", "zeros", "ones", "linspace", "tensor", "eye"))
def _factory(b):
    n = b.name("t")
    shape = b.shape(1, 3)
    numel = math.prod(shape)
    dt = b.dtype(FLOATS + INTS + (torch.bool, torch.float64, torch.uint8))
    d = _dt(dt)
    form = b.choice(["arange", "full", "zeros", "ones", "linspace", "tensor", "eye"])
    if form == "arange":
        code = f"{n} = torch.arange({numel}, device=dev, dtype={d}).reshape({shape!r})"
    elif form == "full":
        code = f"{n} = torch.full({shape!r}, {b.scalar(dt)}, device=dev, dtype={d})"
    elif form in ("zeros", "ones"):
        code = f"{n} = torch.{form}({shape!r}, device=dev, dtype={d})"
    elif form == "linspace":
        code = f"{n} = torch.linspace(-2, 3, {numel}, device=dev, dtype={d}).reshape({shape!r})"
    elif form == "eye":
        code = f"{n} = torch.eye({shape[0]}, {shape[-1]}, device=dev, dtype={d})"
    else:
        vals = [b.integers(-9, 9) for _ in range(numel)]
        code = f"{n} = torch.tensor({vals!r}, device=dev, dtype={d}).reshape({shape!r})"
    return Step("factory", code, {n: "dev"})


@op("new_factory", "creation", ("new_zeros", "new_ones", "new_full", "new_tensor", "zeros_like", "new_empty"))
def _new_factory(b):
    x = _dev(b)
    if x is None:
        return None
    shape = b.shape(0, 2)
    if b.integers(0, 3) == 0:  # made on the host from a device tensor's metadata
        h = b.name("h")
        return Step("new_factory", f"{h} = torch.zeros_like({x}, device='cpu')", {h: "host"})
    n = b.name("t")
    dt = b.dtype(FLOATS + INTS + (torch.bool,))
    form = b.choice([f"{x}.new_zeros({shape!r})", f"{x}.new_ones({shape!r}, dtype={_dt(dt)})",
                     f"{x}.new_full({shape!r}, {b.scalar(dt)}, dtype={_dt(dt)})",
                     f"{x}.new_tensor([1, 2, 3])", f"torch.ones_like({x}, dtype={_dt(dt)})"])
    return Step("new_factory", f"{n} = {form}", {n: "dev"})


@op("host_tensor", "creation", ())
def _host_tensor(b):
    n = b.name("h")
    return Step("host_tensor", f"{n} = {b.host_data(b.shape())}", {n: "host"})


@op("empty_then_write", "creation", ("empty", "empty_like", "empty_strided", "new_empty", "zeros_like",
                                     "ones_like", "full_like", "copy_", "fill_"))
def _empty_then_write(b):
    x = _dev(b)
    n = b.name("t")
    if x is None:
        shape = b.shape()
        return Step("empty_then_write", f"{n} = torch.empty({shape!r}, device=dev)\n{n}.fill_(1.5)", {n: "dev"})
    t = b.t(x)
    mf = b.choice(["", ", memory_format=torch.preserve_format", ", memory_format=torch.contiguous_format"]
                  + ([", memory_format=torch.channels_last"] if t.dim() == 4 else []))
    form = b.choice(["empty_like", "new_empty", "zeros_like", "ones_like", "full_like", "empty_strided"])
    if form == "empty_like":
        code = f"{n} = torch.empty_like({x}{mf})\n{n}.copy_({x})"
    elif form == "new_empty":
        code = f"{n} = {x}.new_empty({tuple(t.shape)!r})\n{n}.copy_({x})"
    elif form == "zeros_like":
        code = f"{n} = torch.zeros_like({x}{mf})"
    elif form == "ones_like":
        code = f"{n} = torch.ones_like({x}, dtype={_dt(b.dtype(FLOATS + INTS))}{mf})"
    elif form == "full_like":
        code = f"{n} = torch.full_like({x}, {b.scalar(t.dtype)}{mf})"
    else:  # dense strides in a permuted order: every byte of the storage is written by the copy
        perm = b.draw(st.permutations(range(t.dim())))
        stride = [0] * t.dim()
        acc = 1
        for d in reversed(perm):
            stride[d] = acc
            acc *= t.shape[d]
        code = (f"{n} = torch.empty_strided({tuple(t.shape)!r}, {tuple(stride)!r}, device=dev, dtype={_dt(t.dtype)})"
                f"\n{n}.copy_({x})")
    return Step("empty_then_write", code, {n: "dev"})


@op("tensor_of_device_scalars", "creation", ("tensor", "item", "_local_scalar_dense"))
def _tensor_of_scalars(b):
    xs = [_dev(b, _nonempty) for _ in range(b.integers(1, 3))]
    if xs[0] is None:
        return None
    elems = []
    for x in xs:
        if x is None:
            continue
        i = b.integers(0, b.t(x).numel() - 1)
        elems.append(f"{x}.reshape(-1)[{i}]")
    on_dev = b.boolean()
    n = b.name("t" if on_dev else "h")
    kw = ", device=dev" if on_dev else ""
    if b.boolean():
        kw += f", dtype={_dt(b.dtype(FLOATS + INTS))}"
    return Step("tensor_of_device_scalars", f"{n} = torch.tensor([{', '.join(elems)}]{kw})",
                {n: "dev" if on_dev else "host"})


# elementwise, reductions, matmul -----------------------------------------------------------------------------
_UNARY = ["torch.neg({x})", "{x}.abs()", "torch.exp({x})", "torch.sin({x})", "{x}.sqrt()", "torch.tanh({x})",
          "torch.sigmoid({x})", "torch.relu({x})", "{x}.floor()", "{x}.sign()", "{x}.reciprocal()",
          "{x}.square()", "torch.nan_to_num({x})", "{x}.logical_not()", "~{x}", "torch.round({x})",
          "torch.erf({x})", "{x}.log1p()", "torch.rsqrt({x})", "{x}.trunc()", "{x}.frac()", "{x}.isnan()",
          "torch.signbit({x})", "{x}.exp2()"]
_SCALAR_BINARY = ["{x} * {s}", "{x} + {s}", "{x} - {s}", "{x} / {s}", "{x} // {s}", "{x} % {s}", "{x} ** 2",
                  "{x} > {s}", "{x} == {s}", "{x}.clamp(min={s})", "{x}.clamp({s}, {s2})",
                  "torch.where({x} > {s}, {x}, {s2})", "{x} & 3", "{x} << 1", "{s} - {x}", "{x}.pow({s})",
                  "{x} * torch.tensor({s})", "{x} + torch.tensor({s}, dtype=torch.float64)",
                  "torch.where({x} > 0, {x}, torch.tensor({s2}))", "torch.add({x}, {s}, alpha=2)",
                  "{x}.add(torch.tensor(3))", "{x}.masked_fill({x} > 0, {s})", "torch.fmod({x}, {s})"]
_BINARY = ["{x} + {y}", "{x} - {y}", "{x} * {y}", "{x} / {y}", "torch.maximum({x}, {y})", "torch.minimum({x}, {y})",
           "torch.atan2({x}, {y})", "{x} == {y}", "{x} < {y}", "torch.logical_and({x}, {y})", "{x} & {y}",
           "{x} ** {y}", "torch.fmod({x}, {y})", "torch.remainder({x}, {y})", "torch.lerp({x}, {y}, 0.3)",
           "torch.addcmul({x}, {y}, {y}, value=0.5)", "torch.where({y} > 0, {x}, {y})", "torch.add({x}, {y}, alpha=3)",
           "torch.hypot({x}, {y})", "torch.copysign({x}, {y})", "torch.xlogy({x}, {y})", "{x}.masked_fill({y} > 0, 1)"]


@op("unary", "elementwise", ())
def _unary(b):
    x = _dev(b)
    if x is None:
        return None
    n = b.name("t")
    return Step("unary", f"{n} = " + b.choice(_UNARY).format(x=x), {n: "dev"})


@op("scalar_binary", "elementwise", ("where", "tensor", "masked_fill"))
def _scalar_binary(b):
    x = _dev(b)
    if x is None:
        return None
    dt = b.t(x).dtype
    n = b.name("t")
    return Step("scalar_binary", f"{n} = " + b.choice(_SCALAR_BINARY).format(
        x=x, s=b.scalar(dt if _ordinary(b.t(x)) else torch.float32), s2=b.scalar(torch.float32)), {n: "dev"})


@op("binary", "elementwise", ("where", "masked_fill"))
def _binary(b):
    x = _dev(b)
    if x is None:
        return None
    y = b.operand_for(x)
    n = b.name("t")
    expr = b.choice(_BINARY)
    if b.boolean():
        expr = expr.replace("{x}", "{X}").replace("{y}", "{x}").replace("{X}", "{y}")
    return Step("binary", f"{n} = " + expr.format(x=x, y=y), {n: "dev"})


_REDUCE = ["{x}.sum()", "{x}.sum({d})", "{x}.sum({d}, keepdim=True)", "{x}.mean()", "{x}.mean({d})", "{x}.prod()",
           "{x}.amax({d})", "{x}.amin()", "{x}.max()", "{x}.max({d}).values", "{x}.max({d}).indices",
           "{x}.min({d}, keepdim=True)[0]", "{x}.argmax()", "{x}.argmin({d})", "{x}.std({d})", "{x}.var()",
           "{x}.norm()", "torch.linalg.vector_norm({x}, 3, {d})", "{x}.cumsum({d})", "{x}.cumprod({d})",
           "torch.logsumexp({x}, {d})", "{x}.any()", "{x}.all({d})", "{x}.sum(dtype=torch.float64)",
           "{x}.count_nonzero()", "torch.sort({x}, {d}, stable=True).values", "torch.sort({x}, {d}, stable=True)[1]",
           "{x}.median()", "torch.cummax({x}, {d}).values", "{x}.softmax({d})", "torch.log_softmax({x}, {d})",
           "{x}.nansum()", "torch.aminmax({x}).max", "{x}.sum(({d},))", "{x}.mean(dtype=torch.float32)"]


@op("reduce", "reduction", ("sort", "cummax", "aminmax", "vector_norm"))
def _reduce(b):
    x = _dev(b, lambda t: t.dim() > 0)
    if x is None:
        return None
    d = b.integers(-b.t(x).dim(), b.t(x).dim() - 1)
    n = b.name("t")
    forms = _REDUCE
    if b.t(x).dtype in (torch.float16, torch.bfloat16):  # a GPU's half scans round every partial (rules/scans.py)
        forms = [f for f in _REDUCE if f not in ("{x}.cumsum({d})", "{x}.cumprod({d})")]
    return Step("reduce", f"{n} = " + b.choice(forms).format(x=x, d=d), {n: "dev"})


@op("data_dependent", "reduction", ("nonzero", "masked_select", "unique", "index", "argwhere"))
def _data_dependent(b):
    # (unique's results are cloned: CUDA's keep storages of the input's size and row-major layouts along a dim, the
    # CPU kernel's are exact or strided: tests/test_differential.py test_unique_results_have_cudas_layouts_and_integer_histc_runs)
    x = _dev(b, _ordinary)
    if x is None:
        return None
    n = b.name("t")
    form = b.choice(["{x}.nonzero()", "{x}[{x} > 0]", "torch.masked_select({x}, {x} != 0)",
                     "torch.unique({x}).clone(memory_format=torch.contiguous_format)", "torch.argwhere({x})", "torch.unique({x}, return_counts=True)[1].clone(memory_format=torch.contiguous_format)",
                     "torch.where({x} != 0)[0]", "{x}.nonzero(as_tuple=True)[-1]" if b.t(x).dim() else "{x}.nonzero()",
                     "torch.unique_consecutive({x})", "{x}.flatten().bincount()" if not b.t(x).dtype.is_floating_point
                     and b.t(x).dtype != torch.bool else "torch.unique({x}, sorted=True).clone(memory_format=torch.contiguous_format)"])
    return Step("data_dependent", f"{n} = " + form.format(x=x), {n: "dev"}, after=lambda: b.holey.add(n))


@op("matmul", "matmul", ("matmul", "mm", "bmm", "addmm", "linear", "einsum", "baddbmm", "mv"))
def _matmul(b):
    x = _dev(b, lambda t: _float(t) and t.dim() >= 1)
    if x is None:
        return None
    t = b.t(x)
    n = b.name("t")
    k = t.shape[-1]
    dt = _dt(t.dtype)
    other = f"({b.fresh_dev((k, b.integers(1, 4)), t.dtype)})"
    forms = [f"{x} @ {other}", f"torch.matmul({x}, {other})"]
    if t.dim() >= 2:
        forms += [f"{x} @ {x}.mT", f"{x}.mT @ {x}", f"torch.nn.functional.linear({x}, {x}.flatten(0, -2))"]
    if t.dim() == 2:
        forms += [f"torch.mm({x}, {x}.t())",
                  f"torch.addmm(torch.ones({t.shape[0]}, 1, device=dev, dtype={dt}), {x}, {other}, beta=0.5)",
                  f"torch.einsum('ij,kj->ik', {x}, {x})", f"torch.mv({x}, {x}[0])"]
    if t.dim() == 3:
        forms += [f"torch.bmm({x}, {x}.transpose(1, 2))",
                  f"torch.baddbmm({x} @ {x}.transpose(1, 2), {x}, {x}.transpose(1, 2), alpha=0.5, beta=2)"]
    return Step("matmul", f"{n} = " + b.choice(forms), {n: "dev"})


# views -------------------------------------------------------------------------------------------------------
def _reshapes(b, shape):
    numel = math.prod(shape)
    opts = [(-1,), (numel,), (1, numel), tuple(shape) + (1,)]
    if len(shape) >= 2:
        opts.append((shape[0] * shape[1],) + tuple(shape[2:]))
        opts.append((-1, shape[-1]))
    for d, s in enumerate(shape):
        for f in range(2, s + 1):
            if s % f == 0:
                opts.append(tuple(shape[:d]) + (f, s // f) + tuple(shape[d + 1:]))
    return b.choice(opts)


@op("view", "view", ("view", "reshape", "flatten", "unflatten", "view_as", "_unsafe_view", "_reshape_alias"))
def _view(b):
    x = _dev(b)
    if x is None:
        return None
    t = b.t(x)
    s = _reshapes(b, tuple(t.shape))
    n = b.name("t")
    forms = [f"{x}.view({s!r})", f"{x}.reshape({s!r})", f"{x}.view(-1)", f"{x}.flatten()"]
    if t.dim() >= 2:
        forms += [f"{x}.flatten(0, 1)", f"{x}.flatten(-2)"]
    if t.dim() >= 1 and t.shape[0] % 2 == 0:
        forms.append(f"{x}.unflatten(0, (2, {t.shape[0] // 2}))")
    y = b.pick("dev", lambda u: u.numel() == t.numel())
    if y is not None:
        forms.append(f"{x}.view_as({y})")
        forms.append(f"{x}.reshape_as({y})")
    return Step("view", f"{n} = " + b.choice(forms), {n: "dev"})


@op("permute", "view", ("transpose", "permute", "t", "movedim", "swapaxes", "mT", "T", "adjoint"))
def _permute(b):
    x = _dev(b)
    if x is None:
        return None
    t = b.t(x)
    n = b.name("t")
    nd = t.dim()
    forms = []
    if nd <= 2:
        forms.append(f"{x}.t()")
    if nd == 2:
        forms.append(f"{x}.T")
    if nd >= 1:
        perm = tuple(b.draw(st.permutations(range(nd))))
        d0, d1 = b.integers(-nd, nd - 1), b.integers(-nd, nd - 1)
        forms += [f"{x}.permute{perm!r}" if nd > 1 else f"{x}.permute(0)", f"{x}.transpose({d0}, {d1})",
                  f"torch.movedim({x}, {d0}, {d1})", f"{x}.swapaxes({d0}, {d1})"]
    if nd >= 2:
        forms += [f"{x}.mT", f"{x}.adjoint()" if t.dtype.is_floating_point else f"{x}.mT"]
    if not forms:
        return None
    return Step("permute", f"{n} = " + b.choice(forms), {n: "dev"})


def _slice_text(b, size):
    start = b.integers(0, size)
    stop = b.integers(start, size)
    step = b.choice([1, 1, 2, 3])
    a = "" if start == 0 else str(start)
    c = "" if stop == size else str(stop)
    return f"{a}:{c}" + ("" if step == 1 else f":{step}")


@op("slice", "view", ("slice", "select", "narrow", "__getitem__", "unbind"))
def _slice(b):
    x = _dev(b, lambda t: t.dim() > 0)
    if x is None:
        return None
    t = b.t(x)
    n = b.name("t")
    d = b.integers(0, t.dim() - 1)
    size = t.shape[d]
    parts = []
    for i in range(t.dim()):
        if b.boolean():
            parts.append(_slice_text(b, t.shape[i]))
        elif t.shape[i] > 0 and b.integers(0, 3) == 0:
            parts.append(str(b.integers(-t.shape[i], t.shape[i] - 1)))
        else:
            parts.append(":")
        if b.integers(0, 5) == 0:
            parts.append("None")
    forms = [f"{x}[{', '.join(parts)}]", f"{x}[..., {_slice_text(b, t.shape[-1])}]"]
    if size > 0:
        forms += [f"{x}.select({d}, {b.integers(-size, size - 1)})", f"{x}.unbind({d})[{b.integers(0, size - 1)}]"]
    start = b.integers(0, size)
    forms.append(f"{x}.narrow({d}, {start}, {b.integers(0, size - start)})")
    return Step("slice", f"{n} = " + b.choice(forms), {n: "dev"})


@op("split", "view", ("split", "chunk", "tensor_split", "split_with_sizes", "unsafe_split"))
def _split(b):
    x = _dev(b, lambda t: t.dim() > 0 and t.numel() > 0)
    if x is None:
        return None
    t = b.t(x)
    n = b.name("t")
    d = b.integers(0, t.dim() - 1)
    size = t.shape[d]
    k = b.integers(1, size)
    forms = [f"{x}.split({k}, {d})[{b.integers(0, (size + k - 1) // k - 1)}]",
             f"{x}.chunk({k}, {d})[-1]", f"torch.tensor_split({x}, {k}, {d})[0]"]
    if size >= 2:
        forms.append(f"{x}.split([1, {size - 1}], {d})[1]")
    return Step("split", f"{n} = " + b.choice(forms), {n: "dev"})


@op("expand", "view", ("expand", "expand_as", "broadcast_to", "unsqueeze", "squeeze"))
def _expand(b):
    x = _dev(b)
    if x is None:
        return None
    t = b.t(x)
    n = b.name("t")
    nd = t.dim()
    forms = [f"{x}.unsqueeze({b.integers(-nd - 1, nd)})", f"{x}.squeeze()"]
    if nd > 0:
        forms.append(f"{x}.squeeze({b.integers(-nd, nd - 1)})")
    target = tuple(s if s != 1 or b.boolean() else b.integers(2, 3) for s in t.shape)
    if b.boolean():
        target = (b.integers(1, 2),) + target
    forms += [f"{x}.expand({target!r})", f"torch.broadcast_to({x}, {target!r})", f"{x}.expand(-1, *{x}.shape[1:])"
              if nd else f"{x}.expand(())"]
    return Step("expand", f"{n} = " + b.choice(forms), {n: "dev"})


@op("unfold_diagonal", "view", ("unfold", "diagonal", "diag_embed", "diag"))
def _unfold_diagonal(b):
    x = _dev(b, lambda t: t.dim() > 0)
    if x is None:
        return None
    t = b.t(x)
    n = b.name("t")
    d = b.integers(0, t.dim() - 1)
    size = b.integers(1, max(1, t.shape[d]))
    forms = [f"{x}.unfold({d}, {size}, {b.integers(1, 3)})"]
    if t.dim() >= 2:
        forms += [f"{x}.diagonal({b.integers(-2, 2)})", f"torch.diagonal({x}, 0, -1, 0)", f"{x}.diagonal(1, 1, 0)"]
    return Step("unfold_diagonal", f"{n} = " + b.choice(forms), {n: "dev"})


@op("as_strided", "view", ("as_strided",))
def _as_strided(b):
    x = _dev(b, lambda t: t.untyped_storage().nbytes() >= t.element_size(), whole=True)
    if x is None:
        return None
    t = b.t(x)
    cap = t.untyped_storage().nbytes() // t.element_size()
    nd = b.integers(0, 3)
    size = [b.integers(1, 3) for _ in range(nd)]
    stride = [b.integers(0, 4) for _ in range(nd)]
    ext = 1 + sum((s - 1) * st_ for s, st_ in zip(size, stride))
    if ext > cap:
        return None
    off = b.integers(0, cap - ext)
    n = b.name("t")
    form = b.choice([f"{x}.as_strided({size!r}, {stride!r}, {off})",
                     f"torch.as_strided({x}, {tuple(size)!r}, {tuple(stride)!r}, {off})",
                     f"{x}.as_strided({size!r}, {stride!r})" if ext <= cap - t.storage_offset() else
                     f"{x}.as_strided({size!r}, {stride!r}, {off})"])
    return Step("as_strided", f"{n} = " + form, {n: "dev"})


@op("view_dtype", "view", ("view",))
def _view_dtype(b):
    x = _dev(b)
    if x is None:
        return None
    n = b.name("t")
    return Step("view_dtype", f"{n} = {x}.view({_dt(b.dtype())})", {n: "dev"})


@op("alias", "view", ("data", "detach", "alias", "contiguous", "to"))
def _alias(b):
    x = _dev(b)
    if x is None:
        return None
    n = b.name("t")
    form = b.choice(["{x}.data", "{x}.detach()", "{x}.contiguous()", "{x}.to({x}.dtype)", "{x}.to(dev)",
                     "{x}.view({x}.shape)", "{x}[...]", "{x}.type({dt})"])
    return Step("alias", f"{n} = " + form.format(x=x, dt=_dt(b.t(x).dtype)), {n: "dev"})


# in-place metadata ops ------------------------------------------------------------------------------------------
@op("inplace_view", "inplace view", ("t_", "transpose_", "unsqueeze_", "squeeze_", "as_strided_", "swapdims_",
                                      "detach_"))
def _inplace_view(b):
    # (not on a tensor autograd tracks: its views would be replayed on the new metadata, a known difference,
    # tests/test_differential.py test_known_view_replay)
    x = _dev(b, lambda t: not t.requires_grad, whole=True)
    if x is None:
        return None
    t = b.t(x)
    nd = t.dim()
    forms = [f"{x}.unsqueeze_({b.integers(-nd - 1, nd)})", f"{x}.squeeze_()", f"{x}.detach_()"]
    if nd <= 2:
        forms.append(f"{x}.t_()")
    if nd > 0:
        forms += [f"{x}.transpose_({b.integers(-nd, nd - 1)}, {b.integers(-nd, nd - 1)})",
                  f"{x}.squeeze_({b.integers(-nd, nd - 1)})", f"{x}.swapdims_(0, {nd - 1})"]
    cap = t.untyped_storage().nbytes() // max(1, t.element_size())
    if cap >= 1:
        k = b.integers(1, cap)
        forms.append(f"{x}.as_strided_(({k},), (1,), {b.integers(0, cap - k)})")
    return Step("inplace_view", b.choice(forms))


@op("resize", "storage", ("resize_", "resize_as_"))
def _resize(b):
    x = _dev(b, lambda t: _ordinary(t) and not t.requires_grad, whole=True)
    if x is None:
        return None
    t = b.t(x)
    shape = b.shape(0, 3, 0, 5)
    isz = t.element_size()
    cap = t.untyped_storage().nbytes()
    y = b.pick("dev", lambda u: u.numel() <= MAX_NUMEL)
    form = "resize_as_" if y is not None and b.boolean() else "resize_"
    if form == "resize_as_":
        shape = tuple(b.t(y).shape)
        code = f"{x}.resize_as_({y})"
    else:
        code = f"{x}.resize_({shape!r})"
    if (t.storage_offset() + math.prod(shape)) * isz > cap:  # the storage grows: its new bytes are written now
        code += f"\n{x}.fill_({b.scalar(t.dtype)})"
    return Step("resize", code)


@op("set_", "storage", ("set_", "untyped_storage"))
def _set(b):
    x = _dev(b, lambda t: _ordinary(t) and not t.requires_grad)
    if x is None:
        return None
    t = b.t(x)
    form = b.choice(["tensor", "storage", "storage_view", "noarg", "new"])
    if form == "noarg":
        return Step("set_", f"{x}.set_()")
    y = b.pick("dev", lambda u: u.dtype == t.dtype, whole=form != "tensor")
    if y is None:
        return None
    u = b.t(y)
    if form == "tensor":
        return Step("set_", f"{x}.set_({y})")
    if form == "storage":
        return Step("set_", f"{x}.set_({y}.untyped_storage())")
    cap = u.untyped_storage().nbytes() // u.element_size()
    if cap < 1:
        return None
    k = b.integers(1, min(cap, 6))
    st_ = b.integers(1, 2)
    ext = 1 + (k - 1) * st_
    if ext > cap:
        return None
    off = b.integers(0, cap - ext)
    if form == "storage_view":
        return Step("set_", f"{x}.set_({y}.untyped_storage(), {off}, ({k},), ({st_},))")
    n = b.name("t")
    return Step("set_", f"{n} = torch.empty(0, device=dev, dtype={_dt(u.dtype)}).set_({y}.untyped_storage(), {off}, "
                        f"({k},), ({st_},))", {n: "dev"})


@op("storage_resize", "storage", ("untyped_storage", "resize_", "set_"))
def _storage_resize(b):
    """Storage resize, as FSDP2 frees and refills parameters: to 0 and back (the tensor then rewritten), or larger
    (the new tail written through a uint8 view of the storage)."""
    x = _dev(b, lambda t: t.untyped_storage().nbytes() > 0 and t.is_contiguous() and t.storage_offset() == 0
             and t.numel() * t.element_size() == t.untyped_storage().nbytes() and _ordinary(t))
    if x is None:
        return None
    t = b.t(x)
    nb = t.untyped_storage().nbytes()
    if b.boolean():
        src = b.pick("dev", lambda u: tuple(u.shape) == tuple(t.shape) and u.untyped_storage().data_ptr()
                     != t.untyped_storage().data_ptr())
        fill = f"{x}.copy_({src})" if src is not None else f"{x}.fill_({b.scalar(t.dtype)})"
        return Step("storage_resize", f"{x}.untyped_storage().resize_(0)\n{x}.untyped_storage().resize_({nb})\n{fill}")
    grow = b.integers(1, 64)
    tail = b.name("t")
    return Step("storage_resize", f"{x}.untyped_storage().resize_({nb + grow})\n"
                                  f"{tail} = torch.empty(0, device=dev, dtype=torch.uint8).set_({x}.untyped_storage(), "
                                  f"{nb}, ({grow},))\n{tail}.fill_({b.integers(0, 255)})", {tail: "dev"})


@op("typed_storage", "storage", ("storage", "_typed_storage", "TypedStorage", "resize_", "set_"))
def _typed_storage(b):
    x = _dev(b)
    if x is None:
        return None
    t = b.t(x)
    if b.boolean() and _ordinary(t) and t.storage_offset() == 0 and t.is_contiguous() and \
            t.numel() * t.element_size() == t.untyped_storage().nbytes():
        n = t.untyped_storage().nbytes() // t.element_size()
        k = b.integers(1, 8)
        tail = b.name("t")  # the storage grows by k elements, written at once through a tensor set_ to them
        return Step("typed_storage", f"{x}.storage().resize_({n + k})\n{tail} = torch.empty(0, device=dev, "
                                     f"dtype={_dt(t.dtype)}).set_({x}.storage(), {n}, ({k},))\n"
                                     f"{tail}.fill_({b.scalar(t.dtype)})", {tail: "dev"})
    form = b.choice(["{x}.storage().size()", "{x}.storage().nbytes()", "{x}.storage().dtype",
                     "{x}.storage().data_ptr() == {x}.untyped_storage().data_ptr()", "len({x}.storage())",
                     "{x}.storage().element_size()"])
    return Step("typed_storage", f"out.append(({len(b.steps)}, {form.format(x=x)}))")


@op("data_assign", "storage", ("data", "set_data"))
def _data_assign(b):
    x = _dev(b, lambda t: not t.requires_grad)
    y = _dev(b)
    if x is None or y is None:
        return None
    form = b.choice(["{x}.data = {y}", "{x}.data = {y}.data", "{x}.data = {y}[..., :1]", "{x}.data = {y}.t()"
                     if b.t(y).dim() <= 2 else "{x}.data = {y}.flatten()"])
    return Step("data_assign", form.format(x=x, y=y))


# in-place value ops ------------------------------------------------------------------------------------------
_INPLACE_SCALAR = ["{x}.add_({s})", "{x}.mul_({s})", "{x}.sub_({s}, alpha=2)", "{x}.div_({s})", "{x}.fill_({s})",
                   "{x}.zero_()", "{x}.clamp_({s}, {s2})", "{x}.clamp_min_({s})", "{x}.neg_()", "{x}.abs_()",
                   "{x}.exp_()", "{x}.relu_()", "{x}.floor_()", "{x}.pow_(2)", "{x}.copy_(torch.tensor({s}))",
                   "{x}.fill_(torch.tensor({s}))", "{x}.masked_fill_({x} > 0, {s})", "{x}.sqrt_()",
                   "{x}.nan_to_num_()", "{x}.sigmoid_()", "{x}[...] = {s}", "{x}.mul_(torch.tensor({s}))"]
_INPLACE_TENSOR = ["{x}.add_({y})", "{x}.mul_({y})", "{x}.sub_({y}, alpha=0.5)", "{x}.div_({y})", "{x}.copy_({y})",
                   "{x}.copy_({y}, non_blocking=True)", "{x}.addcmul_({y}, {y}, value=2)", "{x}.lerp_({y}, 0.25)",
                   "{x}.masked_fill_({y} > 0, -2)", "torch.maximum({x}, {y}, out={x})",
                   "torch.add({x}, {y}, out={x})", "{x}.clamp_(max={y})", "{x}[...] = {y}", "{x}.logical_and_({y})",
                   "{x}.bitwise_or_({y})", "torch.mul({x}, {y}, out={x})"]


@op("inplace_scalar", "inplace", ("copy_", "fill_", "masked_fill_", "tensor"))
def _inplace_scalar(b):
    x = _dev(b, _ordinary)
    if x is None:
        return None
    return Step("inplace_scalar", b.choice(_INPLACE_SCALAR).format(
        x=x, s=b.scalar(b.t(x).dtype), s2=b.scalar(b.t(x).dtype)))


@op("inplace_tensor", "inplace", ("copy_", "masked_fill_"))
def _inplace_tensor(b):
    x = _dev(b, _ordinary)
    if x is None:
        return None
    y = b.operand_for(x, tuple(b.t(x).shape))
    return Step("inplace_tensor", b.choice(_INPLACE_TENSOR).format(x=x, y=y))


@op("out_arg", "inplace", ("out",))
def _out_arg(b):
    """An `out=` argument that is a view of another tensor (of the exact shape: no resize)."""
    x = _dev(b, lambda t: _ordinary(t) and t.numel() > 0)
    if x is None:
        return None
    t = b.t(x)
    y = b.operand_for(x, tuple(t.shape))
    form = b.choice(["torch.add({y}, 1, out={x})", "torch.mul({y}, {y}, out={x})", "torch.neg({y}, out={x})",
                     "torch.sum({y}.unsqueeze(0).expand(2, *{y}.shape), 0, out={x})", "torch.abs({y}, out={x})",
                     "torch.clamp({y}, 0, 1, out={x})",
                     "torch.cat([{y}], out={x})" if t.dim() > 0 else "torch.add({y}, 2, out={x})"])
    return Step("out_arg", form.format(x=x, y=f"({y}).to({_dt(t.dtype)})"))


@op("setitem", "inplace", ("__setitem__", "index_put_", "copy_", "fill_", "slice", "masked_fill_"))
def _setitem(b):
    x = _dev(b, lambda t: t.dim() > 0 and _ordinary(t))
    if x is None:
        return None
    t = b.t(x)
    d0 = t.shape[0]
    lo = b.integers(0, d0)
    hi = b.integers(lo, d0)
    stp = b.choice([1, 2])
    sub = torch.empty(t.shape, device="meta")[lo:hi:stp]
    region = f"{lo}:{hi}" + ("" if stp == 1 else f":{stp}")
    kind = b.choice(["scalar", "tensor", "index", "mask", "accumulate", "host"])
    if kind == "scalar":
        return Step("setitem", f"{x}[{region}] = {b.scalar(t.dtype)}")
    if kind == "tensor":
        y = b.operand_for(x, tuple(sub.shape))
        return Step("setitem", f"{x}[{region}] = {y}")
    if kind == "host":
        return Step("setitem", f"{x}[{region}] = {b.host_data(b.broadcastable_to(tuple(sub.shape)))}")
    if d0 == 0:
        return None
    idx = [b.integers(0, d0 - 1) for _ in range(b.integers(1, 3))]
    if kind == "index":
        return Step("setitem", f"{x}[torch.tensor({idx!r}, device=dev)] = {b.scalar(t.dtype)}")
    if kind == "accumulate":
        vals = b.fresh_dev((len(idx),) + tuple(t.shape[1:]), t.dtype)
        return Step("setitem", f"{x}.index_put_((torch.tensor({idx!r}, device=dev),), {vals}, accumulate=True)")
    return Step("setitem", f"{x}[{x} > 0] = {b.scalar(t.dtype)}")


@op("index_ops", "inplace", ("index_add_", "index_copy_", "index_fill_", "scatter_", "scatter_add_",
                             "scatter_reduce_", "masked_scatter_", "index_select", "gather", "take"))
def _index_ops(b):
    x = _dev(b, lambda t: t.dim() > 0 and t.numel() > 0 and _ordinary(t) and t.dtype != torch.bool)
    if x is None:
        return None
    t = b.t(x)
    d = b.integers(0, t.dim() - 1)
    size = t.shape[d]
    dt = t.dtype
    kind = b.choice(["index_add_", "index_copy_", "index_fill_", "scatter_", "scatter_value", "scatter_add_",
                     "scatter_reduce_", "masked_scatter_", "index_select", "gather"])
    if kind in ("index_add_", "index_copy_", "index_fill_", "index_select"):
        k = b.integers(1, 3)
        idx = [b.integers(0, size - 1) for _ in range(k)]
        if kind == "index_copy_":
            idx = sorted(set(idx))
            k = len(idx)
        it = f"torch.tensor({idx!r}, device=dev)"
        src_shape = tuple(t.shape[:d]) + (k,) + tuple(t.shape[d + 1:])
        src = b.fresh_dev(src_shape, dt)
        if kind == "index_fill_":
            return Step("index_ops", f"{x}.index_fill_({d}, {it}, {b.scalar(dt)})")
        if kind == "index_select":
            n = b.name("t")
            return Step("index_ops", f"{n} = {x}.index_select({d}, {it})", {n: "dev"})
        alpha = ", alpha=2" if kind == "index_add_" and b.boolean() else ""
        return Step("index_ops", f"{x}.{kind}({d}, {it}, {src}{alpha})")
    if kind == "masked_scatter_":
        src = b.fresh_dev(tuple(t.shape), dt)
        return Step("index_ops", f"{x}.masked_scatter_({x} > 0, {src})")
    ishape = tuple(b.integers(1, s) for s in t.shape)
    it = f"torch.randint(0, {size}, {ishape!r}, generator=gen({b.seed()})).to(dev)"
    src = b.fresh_dev(ishape, dt)
    if kind == "scatter_value":
        return Step("index_ops", f"{x}.scatter_({d}, {it}, {b.scalar(dt)})")
    if kind == "scatter_reduce_":
        red = b.choice(["sum", "prod", "mean", "amax", "amin"])
        return Step("index_ops", f"{x}.scatter_reduce_({d}, {it}, {src}, {red!r}, include_self={b.boolean()})")
    if kind == "gather":
        n = b.name("t")
        return Step("index_ops", f"{n} = torch.gather({x}, {d}, {it})", {n: "dev"})
    return Step("index_ops", f"{x}.{kind}({d}, {it}, {src})")


# indexing, sorting and searching, losses, embeddings (the op families of training and inference code) ----------
def _index_tensor(b, size, shape, neg=True, host=True):
    """An int64 index tensor expression of this shape into a dim of `size` (duplicates and negative indices
    included), on the device or (host=True) possibly on the host: a GPU accepts host indices for advanced
    indexing."""
    lo = -size if neg else 0
    vals = torch.tensor([b.integers(lo, size - 1) for _ in range(math.prod(shape))]).reshape(shape).tolist()
    where = b.choice([", device=dev", ""]) if host else ", device=dev"
    return f"torch.tensor({vals!r}{where})"


@op("adv_index", "indexing", ("index", "__getitem__", "__setitem__", "index_put_", "index_put", "take",
                              "take_along_dim", "masked_select", "nonzero", "_index_put_impl_"))
def _adv_index(b):
    x = _dev(b, lambda t: t.dim() > 0 and t.numel() > 0 and _ordinary(t))
    if x is None:
        return None
    t = b.t(x)
    nd = t.dim()
    d0 = t.shape[0]
    n = b.name("t")
    kind = b.choice(["get", "get2", "get_mid", "mask_dim", "take", "take_along", "put", "put_acc", "iadd",
                     "mask_set", "put_tensor"])
    if kind == "get":
        i = _index_tensor(b, d0, b.shape(1, 2, 1, 4))
        return Step("adv_index", f"{n} = {x}[{i}]", {n: "dev"})
    if kind == "get2" and nd >= 2:
        shp = b.shape(1, 2, 1, 3)
        i, j = _index_tensor(b, d0, shp), _index_tensor(b, t.shape[1], b.broadcastable_to(shp))
        return Step("adv_index", f"{n} = {x}[{i}, {j}]", {n: "dev"})
    if kind == "get_mid" and nd >= 3:  # advanced indices split by a slice: their dims go first
        i, j = _index_tensor(b, d0, (2,)), _index_tensor(b, t.shape[2], (2,))
        return Step("adv_index", f"{n} = {x}[{i}, :, {j}]", {n: "dev"})
    if kind == "mask_dim":
        k = b.seed()
        return Step("adv_index", f"{n} = {x}[torch.rand({d0}, generator=gen({k})).to(dev) > 0.5]", {n: "dev"},
                    after=lambda: b.holey.add(n))
    if kind == "take":
        i = _index_tensor(b, t.numel(), b.shape(1, 2, 1, 4), host=False)
        return Step("adv_index", f"{n} = torch.take({x}, {i})", {n: "dev"})
    if kind == "take_along":
        d = b.integers(0, nd - 1)
        shp = tuple(b.integers(1, 3) if k == d else s for k, s in enumerate(t.shape))
        i = f"torch.randint(0, {t.shape[d]}, {shp!r}, generator=gen({b.seed()})).to(dev)"
        return Step("adv_index", f"{n} = torch.take_along_dim({x}, {i}, {d})", {n: "dev"})
    m = b.integers(1, 4)
    i = _index_tensor(b, d0, (m,))
    sub = tuple(t.shape[1:])
    if kind == "put":  # duplicate indices: one of the values lands (the CPU's is one a GPU may give)
        v = b.fresh_dev(b.broadcastable_to((m,) + sub), t.dtype)
        return Step("adv_index", f"{x}[{i}] = {v}")
    if kind == "put_acc":
        v = b.fresh_dev((m,) + sub, t.dtype)
        return Step("adv_index", f"{x}.index_put_(({i},), {v}, accumulate={b.boolean()})")
    if kind == "iadd":  # x[i] += v with a duplicate index adds once (a gather, an add, a scatter)
        return Step("adv_index", f"{x}[{i}] += {b.scalar(t.dtype)}")
    if kind == "mask_set":
        k = b.seed()
        v = b.fresh_dev(sub, t.dtype)
        return Step("adv_index", f"{x}[torch.rand({d0}, generator=gen({k})).to(dev) > 0.5] = {v}")
    v = b.fresh_dev(sub, t.dtype)
    return Step("adv_index", f"{x}[{i}] = {v}")


@op("sort_search", "sort", ("topk", "argsort", "sort", "kthvalue", "msort", "searchsorted", "bucketize",
                            "unique", "unique_consecutive", "repeat_interleave", "isin", "bincount", "histc",
                            "mode", "unique_dim"))
def _sort_search(b):
    x = _dev(b, lambda t: t.dim() > 0 and t.numel() > 0 and _ordinary(t))
    if x is None:
        return None
    t = b.t(x)
    nd = t.dim()
    d = b.integers(-nd, nd - 1)
    size = t.shape[d]
    n = b.name("t")
    k = b.integers(1, size)
    forms = [f"torch.topk({x}, {k}, {d}, largest={b.boolean()}, sorted=True).values",
             f"torch.topk({x}, {k}, {d}).indices", f"{x}.argsort({d}, stable=True, descending={b.boolean()})",
             f"torch.sort({x}, {d}, descending=True, stable=True).indices", f"{x}.kthvalue({k}, {d}).values",
             f"{x}.kthvalue({k}, {d}, keepdim=True).indices", f"torch.msort({x})",
             f"torch.unique({x}, return_inverse=True)[1]", f"torch.unique({x}, dim={d}).clone(memory_format=torch.contiguous_format)",
             f"torch.unique_consecutive({x}, return_counts=True, dim={d})[1].clone(memory_format=torch.contiguous_format)",
             f"torch.repeat_interleave({x}, 2, {d})"]
    if t.dtype != torch.bool:
        bnd = sorted(b.integers(-3, 3) for _ in range(b.integers(1, 4)))
        bdt = _dt(t.dtype)
        forms += [f"torch.bucketize({x}, torch.tensor({bnd!r}, device=dev, dtype={bdt}), right={b.boolean()})",
                  f"torch.bucketize({x}, torch.tensor({bnd!r}, device=dev, dtype={bdt}), out_int32=True)",
                  f"torch.searchsorted(torch.tensor({bnd!r}, device=dev, dtype={bdt}), {x}.reshape(-1), "
                  f"side={b.choice(['left', 'right'])!r})",
                  f"torch.searchsorted({x}.sort(-1).values, {x}, right={b.boolean()})",
                  f"torch.isin({x}, torch.tensor({bnd!r}, device=dev, dtype={bdt}))"]
    if t.dtype in (torch.int64, torch.int32, torch.uint8, torch.int8):
        forms += [f"{x}.reshape(-1).clamp(0, 9).bincount(minlength={b.integers(0, 4)})",
                  f"{x}.reshape(-1).clamp(0, 9).bincount(torch.linspace(0, 1, {t.numel()}, device=dev))",
                  f"torch.repeat_interleave({x}.reshape(-1).clamp(0, 3))",
                  f"torch.repeat_interleave({x}.reshape(-1), {x}.reshape(-1).clamp(0, 2))"]
    if _float(t):
        forms += [f"torch.histc({x}.float(), {b.integers(1, 6)}, -2, 2)", f"{x}.mode({d}).values"]
    return Step("sort_search", f"{n} = " + b.choice(forms), {n: "dev"}, after=lambda: b.holey.add(n))


_LOSSES = [
    "F.cross_entropy({z}, {tgt}, reduction={red!r})",
    "F.cross_entropy({z}, {tgt}, reduction={red!r}, ignore_index=1)",
    "F.cross_entropy({z}, {tgt}, reduction={red!r}, label_smoothing=0.1)",
    "F.cross_entropy({z}, {tgt}, weight=torch.linspace(0.5, 2, {c}, device=dev, dtype={zdt}), reduction={red!r})",
    "F.cross_entropy({z}, {z}.detach().softmax(-1), reduction={red!r})",
    "F.nll_loss({z}.log_softmax(-1), {tgt}, reduction={red!r}, ignore_index=0)",
    "F.mse_loss({z}, {z2}, reduction={red!r})", "F.l1_loss({z}, {z2}, reduction={red!r})",
    "F.smooth_l1_loss({z}, {z2}, reduction={red!r}, beta=0.5)", "F.huber_loss({z}, {z2}, reduction={red!r}, delta=0.3)",
    "F.binary_cross_entropy({z}.sigmoid(), {z2}.sigmoid(), reduction={red!r})",
    "F.binary_cross_entropy_with_logits({z}, ({z2} > 0).to({zdt}), reduction={red!r})",
    "F.binary_cross_entropy_with_logits({z}, {z2}.sigmoid(), pos_weight=torch.full(({c},), 2.0, device=dev, "
    "dtype={zdt}), reduction={red!r})",
    "F.kl_div({z}.log_softmax(-1), {z2}.softmax(-1), reduction={red!r})",
    "F.kl_div({z}.log_softmax(-1), {z2}.log_softmax(-1), reduction={red!r}, log_target=True)",
    "F.soft_margin_loss({z}, {z2}.sign(), reduction={red!r})",
    "F.cosine_embedding_loss({z}, {z2}, torch.ones({nn}, device=dev, dtype={zdt}), reduction={red!r})",
]


@op("loss", "loss", ("cross_entropy", "nll_loss", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss",
                     "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div", "soft_margin_loss",
                     "cosine_embedding_loss", "log_softmax", "nll_loss_nd", "nll_loss2d", "backward",
                     "cross_entropy_loss"))
def _loss(b):
    """torch.nn.functional losses with each reduction mode, and their gradients."""
    nn_, c = b.integers(1, 4), b.integers(2, 5)
    dt = b.choice([torch.float32, torch.float32, torch.bfloat16, torch.float64])
    zdt = _dt(dt)
    z = f"torch.randn({nn_}, {c}, generator=gen({b.seed()})).to(dev, {zdt})"
    z2 = f"(torch.randn({nn_}, {c}, generator=gen({b.seed()})) * 2).to(dev, {zdt})"
    tgt = f"torch.randint(0, {c}, ({nn_},), generator=gen({b.seed()})).to(dev)"
    red = b.choice(["mean", "sum", "none"])
    expr = b.choice(_LOSSES).format(z="z_", z2=z2, tgt=tgt, red=red, c=c, zdt=zdt, nn=nn_)
    n = b.name("t")
    lines = ["F = torch.nn.functional", f"z_ = {z}"]
    new = {n: "dev"}
    if b.boolean():
        g = b.name("t")
        # (a copy: autograd accumulates a gradient of several uses in place for a plain tensor, out of place for
        # a tensor subclass, so their version counters differ: tests/test_differential.py
        # test_known_gradient_accumulation_versions)
        lines += ["z_.requires_grad_()", f"{n} = {expr}", f"{n}.float().sum().backward()", f"{g} = z_.grad.clone()",
                  f"{n} = {n}.detach()"]
        new[g] = "dev"
    else:
        lines.append(f"{n} = {expr}")
    # (a reduced loss keeps the storage of its unreduced buffer, never written past the result: holey)
    return Step("loss", "\n".join(lines), new, after=lambda: b.holey.update(new))


@op("embedding", "indexing", ("embedding", "embedding_renorm_", "embedding_bag", "_embedding_bag",
                              "embedding_dense_backward", "backward", "Embedding", "_embedding_bag_forward_only"))
def _embedding(b):
    """Embedding lookups: padding_idx (no gradient to that row), max_norm (rows looked up are renormalized in the
    weight, in place), embedding_bag's modes."""
    w = _dev(b, lambda t: t.dim() == 2 and t.numel() > 0 and _float(t) and t.dtype != torch.float16
             and not t.requires_grad)
    if w is None:
        v, dim = b.integers(2, 6), b.integers(1, 4)
        w = b.name("t")
        pre = [f"{w} = (torch.randn({v}, {dim}, generator=gen({b.seed()})) * 2).to(dev)"]
        new = {w: "dev"}
    else:
        v = b.t(w).shape[0]
        pre, new = [], {}
    idx = f"torch.tensor({[b.integers(0, v - 1) for _ in range(b.integers(1, 5))]!r}, device=dev)"
    n = b.name("t")
    kind = b.choice(["plain", "padding", "max_norm", "grad", "bag", "module"])
    pad = b.integers(-v, v - 1)
    if kind == "plain":
        pre.append(f"{n} = torch.nn.functional.embedding({idx}, {w})")
    elif kind == "padding":
        pre.append(f"{n} = torch.nn.functional.embedding({idx}, {w}, padding_idx={pad})")
    elif kind == "max_norm":
        pre.append(f"{n} = torch.nn.functional.embedding({idx}, {w}, max_norm={b.choice(['0.5', '1.0', '3.0'])}, "
                   f"norm_type={b.choice(['2.0', '1.0'])})")
    elif kind == "grad":
        g = b.name("t")
        sgf = b.boolean()
        pre += [f"w_ = {w}.detach().clone().requires_grad_()",
                f"{n} = torch.nn.functional.embedding({idx}, w_, padding_idx={pad}, scale_grad_by_freq={sgf})",
                f"{n}.square().sum().backward()", f"{g} = w_.grad.clone()", f"{n} = {n}.detach()"]
        new[g] = "dev"
    elif kind == "bag":
        mode = b.choice(["sum", "mean", "max"])
        offs = sorted({0} | {b.integers(0, 4) for _ in range(2)})
        psw = ""
        if mode == "sum" and b.boolean():
            psw = f", per_sample_weights=torch.linspace(0.5, 1.5, {idx}.numel(), device=dev)"
        pre.append(f"{n} = torch.nn.functional.embedding_bag({idx}, {w}, torch.tensor({offs!r}, device=dev), "
                   f"mode={mode!r}{psw}, include_last_offset={b.boolean()})")
    else:
        m = b.name("t")
        pre += [f"torch.manual_seed({b.seed()})",
                f"e_ = torch.nn.Embedding({v}, 3, padding_idx={pad}, max_norm={b.choice(['None', '1.0'])}).to(dev)",
                f"{n} = e_({idx})", f"{m} = e_.weight.detach()"]
        new[m] = "dev"
    new[n] = "dev"
    return Step("embedding", "\n".join(pre), new)


@op("int_division", "elementwise", ("div", "floor_divide", "remainder", "fmod", "true_divide", "div_",
                                    "floor_divide_", "remainder_", "__floordiv__", "__mod__"))
def _int_division(b):
    """Division with each rounding mode, on integers (negative operands: trunc and floor differ) and floats."""
    x = _dev(b, lambda t: t.dtype in (torch.int32, torch.int64, torch.int8, torch.uint8) or _float(t))
    if x is None:
        return None
    t = b.t(x)
    nz = b.choice(["3", "-2", "7", "-1"]) if t.dtype != torch.uint8 else b.choice(["3", "2"])
    y = b.choice([nz, f"torch.tensor({nz}, device=dev)",
                  f"({x}.abs() + 1).to({_dt(t.dtype)})" if t.dtype != torch.uint8 else f"({x} | 1)"])
    n = b.name("t")
    mode = b.choice(["'floor'", "'trunc'", "None"])
    forms = [f"torch.div({x}, {y}, rounding_mode={mode})", f"torch.floor_divide({x}, {y})", f"{x} // {y}",
             f"torch.remainder({x}, {y})", f"{x} % {y}", f"torch.fmod({x}, {y})", f"torch.true_divide({x}, {y})",
             f"{x}.div({y}, rounding_mode={mode})"]
    if b.integers(0, 3) == 0:
        return Step("int_division", b.choice([f"{x}.div_({y}, rounding_mode={mode})", f"{x}.floor_divide_({y})",
                                              f"{x}.remainder_({y})", f"{x}.fmod_({y})"]))
    return Step("int_division", f"{n} = " + b.choice(forms), {n: "dev"})


@op("lowp_reduce", "reduction", ("sum", "mean", "cumsum", "cumprod", "prod", "softmax", "log_softmax", "var_mean",
                                 "norm", "logsumexp", "std_mean", "nansum", "linalg_vector_norm"))
def _lowp_reduce(b):
    """Reductions of half-precision tensors: accumulation in float32, the result in the input's dtype or the one
    asked for."""
    dt = b.choice([torch.bfloat16, torch.float16])
    shape = (b.integers(1, 8), b.integers(16, 32))
    src = b.choice([f"(torch.randn({shape!r}, generator=gen({b.seed()})) * 40)",
                    f"torch.rand({shape!r}, generator=gen({b.seed()}))",
                    f"torch.full({shape!r}, 0.1) + torch.rand({shape!r}, generator=gen({b.seed()})) * 1e-3"])
    v = b.name("t")
    n = b.name("t")
    d = b.choice([0, 1, -1])
    # (a half / bf16 cumsum or cumprod rounds every partial result on a GPU, the CPU each output once: not drawn,
    # tests/test_gpu_dtype_facts.py checks simdist's against an H200's; the float32 scan is the CPU's on both sides)
    f = b.choice(["{v}.sum()", "{v}.sum({d})", "{v}.mean({d})", "{v}.float().cumsum({d}).to({dt})", "{v}.cumsum({d}, dtype=torch.float32)",
                  "{v}.sum(dtype=torch.float32)", "{v}.float().sum({d}).to({dt})", "{v}.prod({d})",
                  "{v}.softmax({d})", "{v}.softmax({d}, dtype=torch.float32)", "torch.log_softmax({v}, {d})",
                  "torch.var_mean({v}, {d})[0]", "torch.std_mean({v}, {d}, correction=0)[1]", "{v}.norm()",
                  "torch.logsumexp({v}, {d})", "{v}.nansum({d})", "torch.linalg.vector_norm({v}, 2, {d})",
                  "{v}.mean(dtype=torch.float32)", "{v}.float().cumprod({d})", "({v} * {v}).sum({d}, keepdim=True)"])
    return Step("lowp_reduce", f"{v} = {src}.to(dev, {_dt(dt)})\n{n} = " + f.format(v=v, d=d, dt=_dt(dt)),
                {v: "dev", n: "dev"})


# (one_hot takes another path on CUDA: eq of an arange, no host sync, the layout of the broadcast; on the CPU it
# scatters into zeros, version 2: only its values are comparable)
_MISC = ["torch.nn.functional.one_hot({i}.clamp(0, 4), 5).clone(memory_format=torch.contiguous_format)", "{x}.roll({k}, {d})", "{x}.roll(({k}, 1), ({d}, 0))",
         "{x}.flip({d})", "torch.tril({m})", "torch.triu({m}, 1)", "{x}.repeat(2, *([1] * {x}.dim()))", "{x}.tile((2,))",
         "torch.nn.functional.pad({x}, (1, 2), value={s})", "torch.nn.functional.gelu({f})",
         "torch.nn.functional.gelu({f}, approximate='tanh')", "torch.nn.functional.silu({f})",
         "torch.nn.functional.normalize({f}, dim={d})", "torch.clamp({x}, min={x}.flatten()[0], max={x}.flatten()[-1])",
         "{x}.diff(dim={d})", "torch.outer({x}.flatten(), {x}.flatten()[:3])", "torch.nn.functional.dropout({f}, 0.3, "
         "training=False)", "{f}.masked_fill(torch.ones_like({f}, dtype=torch.bool).triu(), float('-inf')).softmax(-1)",
         "torch.nn.functional.layer_norm({f}, {f}.shape[-1:])", "torch.nn.functional.rms_norm({f}, {f}.shape[-1:])",
         "torch.nn.functional.relu6({f})", "torch.nn.functional.leaky_relu({f}, 0.1)", "torch.cumsum({x}, {d}, dtype=torch.int64)", "torch.chunk({x}, 2, {d})[0]", "{x}.T if {x}.dim() == 2 else {x}.mT if {x}.dim() > 2 else {x}",
         "torch.flatten({x}, 0).unsqueeze(-1).expand(-1, 3).contiguous()", "{x}.new_zeros(2).index_add(0, "
         "torch.tensor([0, 0, 1], device=dev), torch.ones(3, device=dev, dtype={x}.dtype))"]


@op("training_misc", "elementwise", ("one_hot", "roll", "flip", "tril", "triu", "repeat", "tile", "pad", "gelu",
                                     "silu", "normalize", "clamp", "diff", "outer", "dropout", "softmax", "layer_norm",
                                     "rms_norm", "relu6", "leaky_relu", "cumsum", "chunk", "index_add",
                                     "constant_pad_nd", "masked_fill"))
def _training_misc(b):
    x = _dev(b, lambda t: t.dim() > 0 and t.numel() > 0 and _ordinary(t) and t.dtype != torch.bool)
    if x is None:
        return None
    t = b.t(x)
    nd = t.dim()
    n = b.name("t")
    f = f"{x}.float()" if not _float(t) else x
    m = x if nd >= 2 else f"{x}.unsqueeze(0)"
    expr = b.choice(_MISC).format(x=x, f=f, m=m, i=f"{x}.long()", k=b.integers(-3, 3), d=b.integers(-nd, nd - 1),
                                  s=b.scalar(t.dtype))
    return Step("training_misc", f"{n} = {expr}", {n: "dev"})


# identity aliasing and error parity ----------------------------------------------------------------------------
_SAME = ["{x}.to({x}.dtype)", "{x}.to(dev)", "{x}.to(dtype={x}.dtype, copy=False)", "{x}.type_as({x})",
         "{x}.contiguous()", "{x}.to(memory_format=torch.preserve_format)", "cuda({x}, dev)", "{x}.to({x})",
         "{x}.to(torch.device(dev))", "{x}.detach()", "{x}.requires_grad_(False)", "{x}.float()", "{x}.long()",
         "{x}.to({x}.device, {x}.dtype)", "{x}.to({x}.dtype, copy=True)", "{x}.type({dt})", "{x}.view_as({x})", "{x}.reshape({x}.shape)", "{x}.expand_as({x})", "{x}.clone()",
         "{x}.contiguous(memory_format=torch.contiguous_format)", "{x}.bfloat16()", "{x}.to(dev, non_blocking=True)",
         "torch.as_tensor({x})", "torch.as_tensor({x}, dtype={x}.dtype)", "torch.as_tensor({x}, device=dev)",
         "torch.asarray({x})", "{x}.squeeze() if {x}.dim() else {x}", "{x}.data"]


@op("identity", "view", ("to", "type_as", "contiguous", "type", "as_tensor", "asarray", "detach", "view_as",
                         "reshape", "expand_as", "clone", "float", "long", "bfloat16", "cuda", "data"))
def _identity(b):
    """Which conversions return the tensor itself (`t.to(t.dtype) is t`, `contiguous()` of a contiguous tensor,
    `as_tensor` of a tensor) and which a new one."""
    x = _dev(b)
    if x is None:
        return None
    i = len(b.steps)
    e = b.choice(_SAME).format(x=x, dt=_dt(b.t(x).dtype))
    return Step("identity", f"r_ = {e}\nout.append(({i}, r_ is {x}, r_.data_ptr() == {x}.data_ptr(), "
                            f"r_._version, r_.is_contiguous()))")


_OVERLAP = ["{x}.expand({ex}).add_(1)", "{x}.expand({ex}).copy_(torch.zeros({ex}, device=dev, dtype={x}.dtype))",
            "torch.add({x}, 1, out={x}.expand({ex}))", "{x}.expand({ex}).zero_()", "{x}.expand({ex}).mul_(2)",
            "{x}.expand({ex})[0].add_(1)", "torch.neg({x}.flatten()[:2], out={x}.flatten()[1:3])",
            "{x}.flatten()[1:].copy_({x}.flatten()[:-1])", "{x}.flatten()[:-1].copy_({x}.flatten()[1:])",
            "{x}.as_strided((2, 2), (1, 1)).fill_(3)",  # (not add_ / mul_ through it: a GPU reads each element
            # before any is written, the CPU loop reads what it wrote: tests/test_differential.py
            # test_an_in_place_op_through_a_self_overlapping_view_reads_before_it_writes)
            "{x}.copy_({x}.mT) if {x}.dim() >= 2 else {x}.copy_({x})",
            "{x}.mT.view(-1)", "{x}.mT.reshape(-1).add_(0)", "{x}.transpose(0, -1).view(-1)", "{x}.expand({ex}).view(-1)", "{x}.mT.view({x}.dtype)",
            "{x}.mT.view(torch.uint8)", "{x}[..., ::2].view(torch.int8)", "{x}.expand({ex}).reshape(-1).add_(1)",
            "{x}.mT.flatten().add_(1)", "{x}.index_put_((torch.tensor([0, 0], device=dev),), {x}[0:1].clone())",
            "{x}.masked_fill_(torch.ones(2, *{x}.shape, dtype=torch.bool, device=dev), 0)",
            "{x}.add_(torch.ones(2, *{x}.shape, device=dev, dtype={x}.dtype))",
            "torch.mul({x}, 2, out={x}.mT)", "{x}.mT.copy_({x})"]


@op("overlap", "error", ("expand", "copy_", "add_", "as_strided", "unfold", "view", "reshape", "index_put_",
                         "masked_fill_", "out", "mul_", "zero_", "fill_", "neg"))
def _overlap(b):
    """In-place writes through views whose elements share memory (expand, overlapping as_strided / unfold,
    input and output overlapping), `view` where only `reshape` can (after a transpose), `view(dtype)` of
    non-contiguous tensors: the same exception type (or none) as eager, at the call, and the same values after."""
    x = _dev(b, lambda t: t.dim() > 0 and t.numel() > 1 and _ordinary(t) and t.dtype != torch.bool
             and not t.requires_grad)
    if x is None:
        return None
    t = b.t(x)
    ex = (b.integers(2, 3),) + tuple(t.shape)
    expr = b.choice(_OVERLAP).format(x=x, ex=ex)
    i = len(b.steps)
    return Step("overlap", f"try:\n    {expr}\n    out.append(({i}, 'no error'))\n"
                           f"except (RuntimeError, IndexError, TypeError, ValueError) as e_:\n"
                           f"    out.append(({i}, type(e_).__name__))\nout.append(({i}, snap({x})))")


@op("copy_dtypes", "inplace", ("copy_", "non_blocking", "to", "type_as", "_to_copy"))
def _copy_dtypes(b):
    """copy_ between dtypes (float8 and bool included), broadcasting, non_blocking, device to device."""
    x = _dev(b, lambda t: t.numel() > 0)
    if x is None:
        return None
    t = b.t(x)
    y = b.pick("dev", lambda u: _broadcasts_to(u.shape, t.shape))
    if y is None:
        y = f"({b.fresh_dev(b.broadcastable_to(tuple(t.shape)), b.dtype())})"
    nb = b.choice(["", ", non_blocking=True", ", non_blocking=False"])
    form = b.choice([f"{x}.copy_({y}{nb})", f"{x}.copy_({y}.to({_dt(b.dtype())}){nb})",
                     f"{x}.copy_({y}.type_as({x}){nb})", f"{x}[...] = {y}"])
    return Step("copy_dtypes", form)


# layouts, casts, joins -----------------------------------------------------------------------------------------
@op("layout", "layout", ("contiguous", "clone", "to", "channels_last", "memory_format"))
def _layout(b):
    x = _dev(b)
    if x is None:
        return None
    t = b.t(x)
    n = b.name("t")
    fmts = ["torch.preserve_format", "torch.contiguous_format"] + (["torch.channels_last"] if t.dim() == 4 else [])
    f = b.choice(fmts)
    form = b.choice([f"{x}.contiguous()", f"{x}.clone()", f"{x}.clone(memory_format={f})",
                     f"{x}.contiguous(memory_format={f})" if f != "torch.preserve_format" else f"{x}.contiguous()",
                     f"{x}.to(memory_format={f})", f"{x}.to(dev, memory_format={f}, copy=True)"])
    return Step("layout", f"{n} = {form}", {n: "dev"})


@op("channels_last", "layout", ("channels_last", "contiguous", "to", "permute", "conv2d", "avg_pool2d"))
def _channels_last(b):
    n = b.name("t")
    shape = (b.integers(1, 2), b.integers(1, 3), b.integers(1, 3), b.integers(1, 3))
    src = b.fresh_dev(shape, b.dtype(FLOATS))
    form = b.choice(["{s}.contiguous(memory_format=torch.channels_last)", "{s}.to(memory_format=torch.channels_last)",
                     "{s}.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)",
                     "torch.nn.functional.avg_pool2d({s}.float().contiguous(memory_format=torch.channels_last), 1)"])
    # (float: CUDA's avg_pool2d has no integer kernel, rules/meta_fixes.py)
    return Step("channels_last", f"{n} = " + form.format(s=src), {n: "dev"})


@op("cast", "cast", ("to", "_to_copy", "float", "half", "bfloat16", "int", "long", "bool", "double", "type",
                     "type_as"))
def _cast(b):
    x = _dev(b)
    if x is None:
        return None
    n = b.name("t")
    dt = b.dtype()
    d = _dt(dt)
    forms = [f"{x}.to({d})", f"{x}.to(dev, {d})", f"{x}.to(dtype={d}, copy=True)", f"{x}.type({d})",
             f"{x}.float()", f"{x}.half()", f"{x}.bfloat16()", f"{x}.int()", f"{x}.long()", f"{x}.bool()",
             f"{x}.double()", f"{x}.to(torch.float8_e4m3fn)", f"{x}.to(torch.float8_e4m3fn).float()",
             f"{x}.to(torch.float8_e5m2).to(torch.bfloat16)"]
    y = _dev(b)
    if y is not None:
        forms += [f"{x}.type_as({y})", f"{x}.to({y})"]
    return Step("cast", f"{n} = " + b.choice(forms), {n: "dev"})


@op("join", "join", ("cat", "stack", "hstack", "vstack", "concat"))
def _join(b):
    x = _dev(b, _ordinary)
    if x is None:
        return None
    t = b.t(x)
    n = b.name("t")
    shape = tuple(t.shape)
    others = []
    for _ in range(b.integers(0, 2)):
        y = b.pick("dev", lambda u: tuple(u.shape) == shape and _ordinary(u))
        others.append(y if y is not None else f"({b.fresh_dev(shape, b.dtype(FLOATS + INTS))})")
    parts = [x] + others + ([f"{x} * 2"] if b.boolean() else [])
    nd = t.dim()
    d = b.integers(-max(nd, 1), max(nd, 1) - 1)
    ds = b.integers(-nd - 1, nd)
    forms = [f"torch.stack([{', '.join(parts)}], {ds})"]
    if nd > 0:
        forms += [f"torch.cat([{', '.join(parts)}], {d})", f"torch.cat([{', '.join(parts)}], dim={d})",
                  f"torch.concat([{', '.join(parts)}])", f"torch.cat([{x}, torch.tensor([], device=dev)])",
                  f"torch.hstack([{', '.join(parts)}])", f"torch.vstack([{', '.join(parts)}])"]
    return Step("join", f"{n} = " + b.choice(forms), {n: "dev"})


# host <-> device ---------------------------------------------------------------------------------------------
@op("to_host", "transfer", ("cpu", "to", "_to_copy", "copy_", "non_blocking", "synchronize"))
def _to_host(b):
    x = _dev(b)
    if x is None:
        return None
    i = len(b.steps)
    # (not .cpu(memory_format=...): on the CPU side that may return the tensor itself, where a GPU copies)
    form = b.choice(["snap({x}.cpu())", "snap({x}.to('cpu'))", "snap({x}.to('cpu', torch.float32))",
                     "snap({x}.to(device='cpu', dtype=torch.float64))", "snap({x}.cpu().float())", "meta({x})"])
    if b.boolean():
        return Step("to_host", f"out.append(({i}, {form.format(x=x)}))")
    h = b.name("h")
    if b.boolean():  # non_blocking into pinned memory: the host waits before reading
        return Step("to_host", f"{h} = {x}.to('cpu', non_blocking=True)\nsync(dev)\nout.append(({i}, snap({h})))")
    return Step("to_host", f"{h} = {x}.to('cpu', copy=True)", {h: "host"})


@op("copy_to_host", "transfer", ("copy_", "non_blocking", "synchronize", "pin_memory"))
def _copy_to_host(b):
    h = b.pick("host", _ordinary)
    if h is None:
        return None
    ht = b.t(h)

    def fits(u):
        try:
            return tuple(torch.broadcast_shapes(tuple(u.shape), tuple(ht.shape))) == tuple(ht.shape)
        except RuntimeError:
            return False
    x = _dev(b, fits)
    if x is None:
        return None
    if b.boolean():
        return Step("copy_to_host", f"{h}.copy_({x})")
    p = b.name("h")
    return Step("copy_to_host", f"{p} = pin(torch.zeros({tuple(ht.shape)!r}, dtype={_dt(ht.dtype)}), dev)\n"
                                f"{p}.copy_({x}, non_blocking=True)\nsync(dev)\n{h}.copy_({p})", {p: "host"})


@op("copy_from_host", "transfer", ("copy_", "non_blocking", "pin_memory", "to", "cuda", "as_tensor"))
def _copy_from_host(b):
    if b.boolean():
        h = b.pick("host")
        if h is None:
            return None
        ht = b.t(h)
        x = _dev(b, lambda u: _ordinary(u) and _broadcasts_to(ht.shape, u.shape))
        if x is None:
            return None
        form = b.choice([f"{x}.copy_({h})", f"{x}.copy_({h}, non_blocking=True)",
                         f"{x}.copy_(pin({h}, dev), non_blocking=True)\nsync(dev)"])
        return Step("copy_from_host", form)
    # moved: a GPU copies, the CPU side's device tensor is the host tensor itself, which is therefore never used
    # again, and must not have been written yet (a GPU's new tensor has version 0)
    h = b.pick("host", lambda t: t._version == 0)
    if h is None:
        return None
    n = b.name("t")
    return Step("copy_from_host", f"{n} = {b.to_dev(h, b.dtype() if b.boolean() else None)}", {n: "dev"}, (h,))


def _broadcasts_to(src, dst):
    try:
        return tuple(torch.broadcast_shapes(tuple(src), tuple(dst))) == tuple(dst)
    except RuntimeError:
        return False


@op("host_values", "transfer", ("tolist", "item", "_local_scalar_dense", "equal", "allclose", "__bool__",
                                "__float__", "__int__", "is_nonzero", "is_set_to"))
def _host_values(b):
    x = _dev(b)
    if x is None:
        return None
    t = b.t(x)
    i = len(b.steps)
    forms = ["{x}.tolist()", "{x}.dim()", "{x}.is_contiguous()", "{x}.numel()"]
    if t.numel() > 0:
        forms += [f"{{x}}.reshape(-1)[{b.integers(0, t.numel() - 1)}].item()", "float({x}.reshape(-1)[0])",
                  "bool({x}.reshape(-1)[-1])", "int({x}.reshape(-1)[0].float().nan_to_num().clamp(-9, 9))"]
    y = _dev(b)
    if y is not None:
        forms += [f"torch.equal({{x}}, {y})", f"{{x}}.is_set_to({y})"]
        if b.t(y).shape == t.shape and _float(t) and _float(b.t(y)):
            forms.append(f"torch.allclose({{x}}, {y}.to({{x}}.dtype))")
    return Step("host_values", f"out.append(({i}, {b.choice(forms).format(x=x)}))")


@op("side_stream", "stream", ("Stream", "stream", "wait_stream"))
def _side_stream(b):
    x = _dev(b, _ordinary)
    if x is None:
        return None
    if b.boolean():  # a new tensor made on the side stream, used on the current one: record_stream
        n = b.name("t")
        form = b.choice(["{x} * 2", "{x}.clone()", "torch.cat([{x}, {x}])" if b.t(x).dim() else "{x} + 1",
                         "{x}.float().sum()"])
        return Step("side_stream", f"with side(dev):\n    {n} = {form.format(x=x)}\nrec({n}, dev)", {n: "dev"})
    form = b.choice(["{x}.mul_(2)", "{x}.add_(1)", "{x}.zero_()", "{x}.fill_(4)", "{x}.copy_({x} * 3)"])
    return Step("side_stream", f"with side(dev):\n    " + form.format(x=x))


@op("autograd", "autograd", ("backward", "grad", "requires_grad_", "CopySlices", "AsStridedBackward"))
def _autograd(b):
    """Gradients through views and in-place ops on views of a non-leaf (autograd's CopySlices), read back from
    the leaf."""
    x = _dev(b, lambda t: _float(t) and t.dtype != torch.float16 and 0 < t.numel())
    if x is None:
        return None
    t = b.t(x)
    leaf = b.name("t")
    lines = [f"{leaf} = {x}.detach().clone().requires_grad_()", f"y_ = {leaf} * 2"]
    for _ in range(b.integers(1, 3)):
        lines.append(b.choice([
            "y_ = y_.exp() if y_.numel() else y_", "y_ = y_.flatten()[::2] * 3", "y_ = y_ @ y_.mT" if t.dim() >= 2
            else "y_ = y_.sin()", "y_[..., :1].mul_(5)", "y_.select(-1, 0).add_(1) if y_.dim() else y_.add_(1)",
            "y_ = y_.t().contiguous() if y_.dim() <= 2 else y_.transpose(0, 1)", "y_ = torch.cat([y_, y_ ** 2])"
            if y_dim_ok(t) else "y_ = y_.square()", "y_ = y_.sum(0, keepdim=True) if y_.dim() else y_",
            "y_ = y_.as_strided((1,), (1,), 0) * 4", "y_ = y_.expand(2, *y_.shape).sum(0)", "y_.relu_()"]))
    red = b.choice(["y_.sum()", "y_.float().square().sum()", "y_.mean() if y_.numel() else y_.sum()"])
    lines.append(f"{red}.backward()")
    g = b.name("t")
    lines.append(f"{g} = {leaf}.grad")
    return Step("autograd", "\n".join(lines), {leaf: "dev", g: "dev"})


def y_dim_ok(t):
    return t.dim() > 0


# errors ------------------------------------------------------------------------------------------------------
_ERRORS = ["{x}.view({bad})", "{x} + {y}", "{x} @ {y}", "{x}.reshape({bad})", "{x}.expand({bad})",
           "{x}.permute(0, 0)", "{x}[{big}]", "{x}.transpose(0, {nd})", "torch.cat([{x}, {y}], {nd})",
           "{x}.view(torch.int64)", "{x}.narrow(0, {big}, 1)", "{x}.unfold(0, {big}, 1)",
           "torch.stack([{x}, {y}])", "{x}.as_strided(({big},), (1,), {big})", "{x}.select(0, {big})",
           "{x}.diagonal(0, 0, 0)", "{x}.split([1, {big}])"]


@op("error", "error", ())
def _error(b):
    """An expression eager torch may refuse for its shapes or views: both sides must refuse it at the call, with
    the same exception type, or both accept it. (Operands of one ordinary dtype: simdist checks shapes at the call,
    from meta kernels, but raises a kernel's dtype refusal (float8 arithmetic, mm of mixed dtypes) only when the
    kernel runs: a known difference, tests/test_differential.py test_known_deferred_errors.)"""
    x = _dev(b, lambda t: _ordinary(t) and t.dtype != torch.bool)
    if x is None:
        return None
    y = _dev(b, lambda t: t.dtype == b.t(x).dtype)
    if y is None:
        return None
    t = b.t(x)
    big = max(t.shape, default=1) + b.integers(0, 3)
    bad = tuple(b.integers(1, 5) for _ in range(b.integers(1, 3)))
    # (no integer products: CUDA has no integer mm / dot kernels and refuses them where the CPU computes,
    # rules/meta_fixes.py; tests/test_differential.py test_integer_products_are_refused_as_cuda_refuses_them)
    forms = _ERRORS if t.is_floating_point() else [e for e in _ERRORS if "@" not in e]
    expr = b.choice(forms).format(x=x, y=y, bad=bad, big=big, nd=t.dim() + 1)
    i = len(b.steps)
    return Step("error", f"try:\n    {expr}\n    out.append(({i}, 'no error'))\n"
                         f"except (RuntimeError, IndexError, TypeError, ValueError) as e_:\n"
                         f"    out.append(({i}, type(e_).__name__))")


# modules and optimizers -------------------------------------------------------------------------------------
_MODULES = {
    "linear": ("torch.nn.Linear({i}, {o}, bias={bias})", lambda i, o: ("linear", (2, i))),
    "mlp": ("torch.nn.Sequential(torch.nn.Linear({i}, {o}), torch.nn.ReLU(), torch.nn.Linear({o}, {i}))",
            lambda i, o: ("linear", (3, i))),
    "layernorm": ("torch.nn.LayerNorm({i})", lambda i, o: ("linear", (2, i))),
    "conv": ("torch.nn.Conv2d({i}, {o}, 3, padding=1, bias={bias})", lambda i, o: ("conv", (1, i, 3, 3))),
    "embedding": ("torch.nn.Embedding(5, {o})", lambda i, o: ("index", (3,))),
    "batchnorm": ("torch.nn.BatchNorm1d({i})", lambda i, o: ("linear", (4, i))),
}


@op("module_new", "module", ("Linear", "Sequential", "LayerNorm", "Conv2d", "Embedding", "BatchNorm1d"))
def _module_new(b):
    kind = b.choice(list(_MODULES))
    i, o = b.integers(1, 4), b.integers(1, 4)
    m = b.name("m")
    text = _MODULES[kind][0].format(i=i, o=o, bias=b.boolean())
    move = b.choice(["", ".to(dev)", ".cuda", ".to(dev, torch.bfloat16)"])
    placed = "host" if not move else "dev"
    text = f"cuda({text}, dev)" if move == ".cuda" else text + move
    info = {"placed": placed, "kept": {}, "tags": [], "input": _MODULES[kind][1](i, o), "opts": []}
    return Step("module_new", f"torch.manual_seed({b.seed()})\n{m} = {text}", {m: "mod"},
                after=lambda: b.mods.__setitem__(m, info))


def _module(b, pred=None):
    names = [m for m in b.mods if b.kinds.get(m) == "mod" and (pred is None or pred(b.mods[m]))]
    return None if not names else b.choice(names)


def _params(b, m):
    return [n for n, _ in b.ns[m].named_parameters()]


@op("module_tag", "module", ("Parameter",))
def _module_tag(b):
    m = _module(b)
    if m is None:
        return None
    ps = _params(b, m)
    if not ps:
        return None
    p = b.choice(ps)
    tag = b.choice(["tensor_model_parallel", "partition_dim", "sequence_parallel", "shared"])
    val = b.choice(["True", "0", "1", "'tp'"])
    return Step("module_tag", f"{m}.get_parameter({p!r}).{tag} = {val}",
                after=lambda: b.mods[m].__setitem__("tags", sorted(set(b.mods[m]["tags"]) | {tag})))


@op("module_keep", "module", ("Parameter",))
def _module_keep(b):
    """Keep a reference to a parameter: after .cuda()/.to() it must still be the module's parameter."""
    m = _module(b)
    if m is None:
        return None
    ps = _params(b, m)
    if not ps:
        return None
    p = b.choice(ps)
    k = b.name("p")
    return Step("module_keep", f"{k} = {m}.get_parameter({p!r})", {k: "param"},
                after=lambda: b.mods[m]["kept"].__setitem__(p, k))


def _stateless(b, m):
    return not any(b.opts[o]["stateful"] for o in b.mods[m]["opts"] if b.kinds.get(o) == "opt")


@op("module_move", "module", ("to", "cuda", "cpu", "half", "float", "bfloat16", "double", "_apply",
                              "swap_tensors", "set_data", "_has_compatible_shallow_copy_type"))
def _module_move(b):
    m = _module(b)
    if m is None:
        return None
    info = b.mods[m]
    forms = [("{m}.to(dev)", "dev"), ("cuda({m}, dev)", "dev"), ("{m}.cpu()", "host"), ("{m}.half()", None),
             ("{m}.float()", None), ("{m}.bfloat16()", None), ("{m}.to(torch.float16)", None),
             ("{m}.to(dev, torch.bfloat16)", "dev"), ("{m}.to(device=dev, dtype=torch.float32)", "dev"),
             ("{m}.double()", None), ("{m}.to(dev, non_blocking=True)", "dev"), ("{m}.to(torch.float32)", None)]
    text, placed = b.choice(forms)
    if placed is not None and placed != info["placed"] and (not _stateless(b, m) or info.get("aliased")):
        # optimizer state stays where it was made: a later step would mix devices; and parameters viewing a flat
        # buffer (param_data) stay views of it on the CPU side, where a GPU copies them away from it
        return None
    return Step("module_move", text.format(m=m), after=lambda: info.__setitem__("placed", placed or info["placed"]))


def _module_input(b, m):
    info = b.mods[m]
    kind, shape = info["input"]
    dtype = next(iter(b.ns[m].parameters())).dtype if list(b.ns[m].parameters()) else torch.float32
    if kind == "index":
        host = f"torch.randint(0, 5, {shape!r}, generator=gen({b.seed()}))"
    else:
        host = f"torch.randn({shape!r}, generator=gen({b.seed()})).to({_dt(dtype)})"
        if kind == "conv" and b.boolean():
            host += ".contiguous(memory_format=torch.channels_last)"
    return b.to_dev(host) if info["placed"] == "dev" else host


@op("module_forward", "module compute", ("linear", "addmm", "conv2d", "layer_norm", "embedding", "batch_norm",
                                 "native_layer_norm", "convolution", "relu"))
def _module_forward(b):
    m = _module(b)
    if m is None:
        return None
    place = b.mods[m]["placed"]
    n = b.name("t" if place == "dev" else "h")
    ctx = b.choice(["", "with torch.no_grad():\n    "])
    return Step("module_forward", f"{ctx}{n} = {m}({_module_input(b, m)})", {n: place})


@op("module_backward", "module compute", ("backward", "sum", "mm", "linear", "convolution_backward",
                                  "native_layer_norm_backward", "embedding_dense_backward", "threshold_backward"))
def _module_backward(b):
    m = _module(b)
    if m is None:
        return None
    red = b.choice(["sum()", "square().mean()", "float().sum()"])
    return Step("module_backward", f"{m}({_module_input(b, m)}).{red}.backward()")


@op("module_grads", "module compute", ("grad", "full_like", "zero_grad"))
def _module_grads(b):
    m = _module(b)
    if m is None:
        return None
    form = b.choice([f"for p_ in {m}.parameters():\n    p_.grad = torch.full_like(p_, {b.choice(['0.5', '-1.0', '3.0'])})",
                     f"{m}.zero_grad()", f"{m}.zero_grad(set_to_none=False)",
                     f"for p_ in {m}.parameters():\n    p_.grad = p_.detach().clone().mul_(2)"])
    return Step("module_grads", form)


@op("optimizer_new", "optimizer", ("SGD", "Adam", "AdamW", "foreach", "fused"))
def _optimizer_new(b):
    m = _module(b)
    if m is None:
        return None
    o = b.name("o")
    kind = b.choice(["SGD", "Adam", "AdamW"])
    impl = b.choice(["foreach=False", "foreach=True", "fused=True"])
    extra = {"SGD": f"lr=0.1, momentum={b.choice(['0.0', '0.9'])}", "Adam": "lr=0.01", "AdamW": "lr=0.01, "
             "weight_decay=0.1"}[kind]
    def after():
        b.opts[o] = {"module": m, "stateful": False, "foreach": impl == "foreach=True"}
        b.mods[m]["opts"].append(o)
    return Step("optimizer_new", f"{o} = torch.optim.{kind}({m}.parameters(), {extra}, {impl})", {o: "opt"},
                after=after)


@op("optimizer_step", "optimizer", ("step", "_foreach_add_", "_fused_adam_", "_fused_adamw_", "_fused_sgd_",
                                 "lerp_", "addcdiv_", "_foreach_lerp_", "_foreach_addcdiv_", "sqrt"))
def _optimizer_step(b):
    names = [o for o in b.opts if b.kinds.get(o) == "opt"]
    if not names:
        return None
    o = b.choice(names)
    m = b.opts[o]["module"]
    grads = b.choice(["", f"for p_ in {m}.parameters():\n    p_.grad = torch.full_like(p_, {b.choice(['0.5', '-2.0'])})\n",
                      f"{m}({_module_input(b, m)}).sum().backward()\n"])
    def after():
        b.opts[o]["stateful"] = True
        if b.opts[o]["foreach"]:
            b.mods[m]["foreach"] = True
    return Step("optimizer_step", grads + f"{o}.step()" + (f"\n{o}.zero_grad()" if b.boolean() else ""),
                after=after)


@op("module_state", "module compute", ("state_dict", "load_state_dict", "copy_", "detach"))
def _module_state(b):
    """state_dict() tensors are detached aliases of the parameters and buffers; load_state_dict copies in place."""
    m = _module(b)
    if m is None:
        return None
    names = [n for n, _ in b.ns[m].state_dict().items()]
    if not names:
        return None
    k = b.choice(names)
    form = b.choice([f"{m}.state_dict()[{k!r}].mul_(2)",
                     f"{m}.load_state_dict({{k_: v_ * 2 for k_, v_ in {m}.state_dict().items()}})",
                     f"{m}.load_state_dict({{k_: v_.cpu() + 1 for k_, v_ in {m}.state_dict().items()}})",
                     f"out.append(({len(b.steps)}, snap({m}.state_dict()[{k!r}])))"])
    return Step("module_state", form)


@op("param_data", "module compute", ("data", "set_data", "view_as", "copy_", "zeros"))
def _param_data(b):
    """Megatron's distributed optimizer: each parameter's data becomes a view of one flat buffer."""
    m = _module(b, lambda i: i["placed"] == "dev")
    if m is None:
        return None
    ps = list(b.ns[m].named_parameters())
    if not ps:
        return None
    total = sum(p.numel() for _, p in ps)
    buf = b.name("t")
    lines = [f"{buf} = torch.zeros({total}, device=dev, dtype={_dt(ps[0][1].dtype)})"]
    off = 0
    for pn, p in ps:
        lines.append(f"{buf}[{off}:{off + p.numel()}].copy_({m}.get_parameter({pn!r}).data.view(-1))")
        lines.append(f"{m}.get_parameter({pn!r}).data = {buf}[{off}:{off + p.numel()}].view_as("
                     f"{m}.get_parameter({pn!r}))")
        off += p.numel()
    return Step("param_data", "\n".join(lines), {buf: "dev"}, after=lambda: b.mods[m].__setitem__("aliased", True))


# --- drawing a program --------------------------------------------------------------------------------------
_OP_NAMES = list(OPS)
_STARTERS = ["from_host", "factory", "channels_last", "host_tensor", "module_new"]


def _final_line(b):
    tensors = [n for n, k in b.kinds.items() if k in ("dev", "host")]
    mods = []
    for m, info in b.mods.items():
        if b.kinds.get(m) != "mod":
            continue
        kept = "{" + ", ".join(f"{p!r}: {k}" for p, k in info["kept"].items()) + "}"
        mods.append(f"{m!r}: ({m}, {info['placed']!r}, {kept}, {info['tags']!r}, {info.get('foreach', False)})")
    opts = [o for o in b.opts if b.kinds.get(o) == "opt"]
    return (f"out.append(('final', final(dev, {{{', '.join(f'{n!r}: {n}' for n in tensors)}}}, "
            f"{{{', '.join(mods)}}}, {{{', '.join(f'{o!r}: {o}' for o in opts)}}})))")


@st.composite
def programs(draw, max_steps=12, ops=None):
    """A straight-line program of up to max_steps steps drawn from OPS (or the named subset), valid on the
    CPU by construction."""
    names = list(ops) if ops is not None else _OP_NAMES
    cats = {}
    for nm in names:
        cats.setdefault(OPS[nm].category, []).append(nm)
    cat_names = list(cats)
    b = _Builder(draw)
    for _ in range(draw(st.integers(1, 3))):  # something to work on
        b.try_step(OPS[draw(st.sampled_from(_STARTERS))].make(b))
    for _ in range(draw(st.integers(1, max_steps))):
        for _attempt in range(4):  # an op with nothing to work on yet: draw another
            cat = draw(st.sampled_from(cat_names))  # a category, then an op: every op is drawn about as often
            step = OPS[draw(st.sampled_from(cats[cat]))].make(b)
            if step is not None:
                break
        b.try_step(step)
    return b.finish()


# --- running a program both ways -------------------------------------------------------------------------------
@dataclass
class Refusal:
    """simdist refused the program with UnsupportedOperation at `step` (an op of the table), naming `api`."""
    step: int
    op: str
    api: str
    message: str


def run_both(prog, seed=0):
    """(simdist's returns or its exception, eager CPU returns)."""
    import simdist
    try:
        res = simdist.run(prog, args=("cuda",), seed=seed)
        got = res
    except Exception as e:  # noqa: BLE001 - judged by check()
        got = e
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as simdist's kernels run: reductions split over threads round differently
    try:
        want = prog("cpu")
    finally:
        torch.set_num_threads(threads)
    return got, want


def _fail(prog, what):
    raise PropertyFailure(f"differential: {what}\n--- program (paste to reproduce) ---\n{prog.source}")


def check(prog, seed=0):
    """Run `prog` under simdist and eagerly; raise PropertyFailure on any difference, any hazard report or any
    exception but a named refusal. Returns None, or the Refusal."""
    from simdist import UnsupportedOperation
    got, want = run_both(prog, seed)
    if isinstance(got, UnsupportedOperation):
        i = prog.step_of(got)
        if i is None:
            _fail(prog, f"UnsupportedOperation outside any step: {got}")
        opname = prog.steps[i].op
        msg = str(got)
        apis = OPS[opname].names
        named = [a for a in apis if re.search(r"(?<![A-Za-z0-9])" + re.escape(a) + r"(?![A-Za-z0-9])", msg)]
        if not named:
            _fail(prog, f"step {i} ({opname}) was refused without naming its operation ({', '.join(apis)}): {msg}")
        return Refusal(i, opname, named[0], msg)
    if isinstance(got, BaseException):
        i = prog.step_of(got)
        where = f"step {i} ({prog.steps[i].op})" if i is not None else "outside any step"
        tb = "".join(traceback.format_exception(type(got), got, got.__traceback__))
        _fail(prog, f"simdist raised {type(got).__name__} at {where}; eager CPU torch ran the program\n{tb}")
    if got.hazards:
        _fail(prog, f"simdist reported {len(got.hazards)} hazard(s) in a correctly synchronized program; first:\n"
                    f"{got.hazards[0]}")
    g, w = got.returns[0], want
    d = first_difference(g, w)
    if d is not None:
        path, a, b_ = d
        m = re.match(r"\[(\d+)\]\[1\]", path)
        tag = g[int(m.group(1))][0] if m and int(m.group(1)) < len(g) else None
        where = ""
        if isinstance(tag, int) and 0 <= tag < len(prog.steps):
            where = f" (output of step {tag}, {prog.steps[tag].op})"
        elif tag == "final":
            where = " (the final state)"
        _fail(prog, f"values differ at out{path}{where}:\n  simulated: {_short(a)}\n  eager:     {_short(b_)}")
    return None


# --- random numbers: reproducibility, not values ------------------------------------------------------------------
# A GPU's Philox stream is not the CPU's mt19937, so random values cannot be compared; what both devices promise is
# the structure: the same seed (torch.manual_seed, torch.cuda.manual_seed, a Generator's manual_seed), or a restored
# state (get_rng_state / set_rng_state, fork_rng), gives the same numbers again, and anything else gives new ones.
# `random_programs()` draws seeding events and random ops; `check_random` requires that (1) simdist's values do not
# depend on its schedule seed (reads at launch: simdist/faces/rng.py) and (2) which pairs of draws of the same
# op and shape are equal is the same under simdist as eagerly (and, run on a GPU, as there).
def cseed(dev, k):
    """torch.cuda.manual_seed on the GPU side; the CPU side has one generator: torch.manual_seed."""
    if dev == "cuda":
        torch.cuda.manual_seed(k)
    else:
        torch.manual_seed(k)


def rng_state(dev):
    return torch.cuda.get_rng_state() if dev == "cuda" else torch.get_rng_state()


def set_rng_state(dev, s):
    if dev == "cuda":
        torch.cuda.set_rng_state(s)
    else:
        torch.set_rng_state(s)


def fork(dev):
    return torch.random.fork_rng(device_type="cuda") if dev == "cuda" else torch.random.fork_rng()


_NS.update(cseed=cseed, rng_state=rng_state, set_rng_state=set_rng_state, fork=fork)
_RANDOM_HEADER = ("from simdist.properties.differential import cseed, fork, rng_state, set_rng_state, side, snap\n"
                  "import torch\n")
_DRAWS = {"randn": "torch.randn({s}, device=dev{g})", "rand": "torch.rand({s}, device=dev{g})",
          "randint": "torch.randint(0, 2**30, {s}, device=dev{g})",
          "normal_": "torch.empty({s}, device=dev).normal_(1.0, 2.0{g})",
          "uniform_": "torch.zeros({s}, device=dev).uniform_(-1, 1{g})",
          "bernoulli": "torch.bernoulli(torch.full({s}, 0.5, device=dev){g})",
          "randn_like": "torch.randn_like(torch.zeros({s}, device=dev))",
          "dropout": "torch.nn.functional.dropout(torch.ones({s}, device=dev), 0.5)",
          "multinomial": "torch.multinomial(torch.ones(64, device=dev), 24, replacement=True{g})",
          "exponential_": "torch.empty({s}, device=dev).exponential_({g0})"}
_NO_GENERATOR = ("randn_like", "dropout")


class RandomProgram:
    def __init__(self, lines, histories):
        self.lines = lines
        self.histories = histories  # per draw: (op and shape, the seeding it follows, the random ops since)
        self.source = _RANDOM_HEADER + "def prog(dev):\n    out = []\n" + "".join(
            "    " + ln + "\n" for ln in lines) + "    return out\n"
        ns = dict(_NS)
        exec(compile(self.source, "<simdist-random-program>", "exec"), ns)
        self._fn = ns["prog"]
        self.__name__ = self.__qualname__ = "prog"
        self.__module__ = __name__

    def __call__(self, dev):
        return self._fn(dev)

    def __repr__(self):
        return self.source


@st.composite
def random_programs(draw, max_steps=12):
    """Seeding events and random draws (64 elements or more each: two different draws never coincide), after a
    first torch.manual_seed (an unseeded draw would depend on the process's history). Each draw's history is kept:
    the seed its generator was last given (torch.manual_seed, torch.cuda.manual_seed and Generator.manual_seed of
    one value start one stream) and the random ops it issued since (a state restored, or a fork_rng left, brings
    its history back)."""
    k0 = draw(st.integers(0, 3))
    lines, gens, states, hist = [f"torch.manual_seed({k0})"], [], {}, {"default": (k0, ())}
    histories = []

    def draw_line(indent=""):
        op = draw(st.sampled_from(sorted(_DRAWS)))
        shape = draw(st.sampled_from([(64,), (8, 8), (4, 32)]))
        g, src = "", "default"
        if op not in _NO_GENERATOR and gens and draw(st.booleans()):
            src = draw(st.sampled_from(gens))
            g = f"generator={src}"
        expr = _DRAWS[op].format(s=shape, g=", " + g if g else "", g0=g)
        key = f"{op}{shape}"
        seed, ops = hist[src]
        histories.append((key, seed, ops))
        hist[src] = (seed, ops + (key,))
        return [f"{indent}r_ = {expr}", f"{indent}out.append(({key!r}, snap(r_)))"]

    for _ in range(draw(st.integers(1, max_steps))):
        kind = draw(st.sampled_from(["draw", "draw", "draw", "seed", "cseed", "generator", "gseed", "save", "restore",
                                     "fork", "side"]))
        k = draw(st.integers(0, 3))
        if kind == "seed":
            lines.append(f"torch.manual_seed({k})")
            hist["default"] = (k, ())
        elif kind == "cseed":
            lines.append(f"cseed(dev, {k})")
            hist["default"] = (k, ())
        elif kind == "generator":
            g = f"g{len(gens)}"
            gens.append(g)
            lines.append(f"{g} = torch.Generator(device=dev).manual_seed({k})")
            hist[g] = (k, ())
        elif kind == "gseed" and gens:
            g = draw(st.sampled_from(gens))
            lines.append(f"{g}.manual_seed({k})")
            hist[g] = (k, ())
        elif kind == "save":
            name = f"s{len(states)}"
            states[name] = hist["default"]
            lines.append(f"{name} = rng_state(dev)")
        elif kind == "restore" and states:
            name = draw(st.sampled_from(sorted(states)))
            lines.append(f"set_rng_state(dev, {name})")
            hist["default"] = states[name]
        elif kind == "fork":
            saved = hist["default"]
            lines.append("with fork(dev):")
            lines += draw_line("    ")
            hist["default"] = saved
        elif kind == "side":
            lines.append("with side(dev):")
            lines += draw_line("    ")
        else:
            lines += draw_line()
    return RandomProgram(lines, histories)


def equality_pattern(out):
    """For each pair of draws of one op and shape, whether they are equal."""
    pat = []
    for i, (ki, vi) in enumerate(out):
        for j in range(i):
            kj, vj = out[j]
            if ki == kj:
                pat.append((j, i, torch.equal(vi, vj)))
    return pat


def check_random(prog):
    """Under simdist: draws that do not depend on the schedule seed; draws of one op and shape with one history
    (the same seed, the same random ops since) equal, and with another seed different, as on a GPU and eagerly.
    (Two histories from one seed with as many ops are equal under simdist, whose offset counts ops: whether they
    are on a GPU depends on how far each op moves Philox's offset, which simdist does not model.) Eager CPU's draws
    are held to the same: one history, the same values."""
    import simdist
    a = simdist.run(prog, args=("cuda",), seed=0).returns[0]
    b = simdist.run(prog, args=("cuda",), seed=1).returns[0]
    if [k for k, _ in a] != [k for k, _ in b] or not all(torch.equal(x, y) for (_, x), (_, y) in zip(a, b)):
        _fail(prog, "simulated random numbers depend on the schedule seed")
    eager = prog("cpu")
    h = prog.histories
    for i in range(len(h)):
        for j in range(i):
            if h[i][0] != h[j][0]:
                continue
            same = h[i] == h[j]
            for side_, out in (("simulated", a), ("eager", eager)):
                eq = torch.equal(out[i][1], out[j][1])
                if same and not eq:
                    _fail(prog, f"{side_}: draws {j} and {i} have one history {h[i]} but differ")
            if h[i][1] != h[j][1] and torch.equal(a[i][1], a[j][1]):
                _fail(prog, f"simulated: draws {j} and {i} follow different seeds {h[j][1]}, {h[i][1]} but are equal")
