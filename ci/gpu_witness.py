"""A light hook on the real CUDA build that counts device ops per stream as simdist counts them, and replays a
witness (simdist/witness.py) by putting `torch.cuda._sleep(cycles)` on the named stream before the named op.

No change to the program: the hook is a TorchDispatchMode plus wrappers around a few Python entry points, all
installed around `runpy.run_path` and removed after it:
- aten ops (the dispatch mode): what simdist/faces/dispatch.py launches: every in-place, functional, host-reading
  and factory op with a CUDA tensor or a CUDA device, one op each, named as simdist names them (op_info's name;
  `_to_copy` / `copy_` / `.item()` by direction: copy_h2d, copy_h2d_async (pinned source, non_blocking), copy_d2h,
  copy_d2h_async, _to_copy, copy_, item, as simdist/faces/rules/copies.py); not views, not `empty` /
  `empty_strided` / `*_like` allocations, not `lift_fresh` (simdist/faces/rules/factories.py);
- collectives (wrappers of torch.distributed's functions, whose own device work is not counted again):
  one `nccl:<kind>` op each, on the current stream when synchronous and on the group's internal stream
  `rankR/nccl:<group desc>` when async_op=True (NCCL >= 2.8 semantics, simdist/engine/collectives.py
  launch_collective); point-to-point on `rankR/nccl:p2p:<lo>-<hi>` (`:send` / `:recv` inside batch_isend_irecv);
  barrier as ProcessGroupNCCL's (a `zeros` kernel on the current stream, then an async all_reduce); each also
  advances its group's call counter, simdist's collective key (group, call);
- `torch.cuda._sleep` of the program (an op of simdist's too; simdist's trace omits it, having no kernel body);
- streams: `torch.cuda.Stream()` is numbered per device in creation order, as simdist names user streams
  (`rankR/cuda:D/streamN`); the default stream is `rankR/cuda:D/default`.

`python ci/gpu_witness.py --check-counts [--dir DIR]` runs every program of the folder inside simdist with this
hook installed in the program (its counting logic on simdist's own ops, no sleeps) and compares what it counted,
stream by stream, with simdist's op log of the same run; then replays each hazard's witness through the hook's
sleeps inside simdist (the same placement the GPU gets) and checks that simdist observes the damage.
"""
from __future__ import annotations

import argparse
import contextlib
import inspect
import io
import json
import os
import runpy
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import torch  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

SLEEP_CYCLES_PER_NS = 1.98  # simdist/engine/cost.py: torch.cuda._sleep's clock
LAUNCH_NS = 5_000  # simdist/engine/ops.py: what one launch costs the host in simdist's cost model
CPU_SCALES = (1, 10, 100)

_COLLECTIVES = {  # torch.distributed function -> simdist's collective kind
    "all_reduce": "all_reduce", "broadcast": "broadcast", "reduce": "reduce", "all_gather": "all_gather",
    "all_gather_into_tensor": "all_gather", "_all_gather_base": "all_gather", "reduce_scatter": "reduce_scatter",
    "reduce_scatter_tensor": "reduce_scatter", "_reduce_scatter_base": "reduce_scatter", "all_to_all": "all_to_all",
    "all_to_all_single": "all_to_all", "gather": "gather", "scatter": "scatter",
}
_P2P = {"send": True, "isend": True, "recv": False, "irecv": False}


def _flat(x, out):
    if isinstance(x, torch.Tensor):
        out.append(x)
    elif isinstance(x, (list, tuple)):
        for y in x:
            _flat(y, out)
    elif isinstance(x, dict):
        for y in x.values():
            _flat(y, out)
    return out


class OpHook:
    """Counts ops per stream (and collective calls per group) for one rank; sleeps before the witness's ops.

    delays: the witness's "delays" entries (simdist/witness.py); those of other ranks are ignored.
    scale: the sleep is delay_ns x 1.98 x scale cycles (a GPU's ops are not simdist's cost model's).
    """

    def __init__(self, rank, delays=(), scale=1.0, keep_log=True, sleep=None):
        self.rank = rank
        self.scale = scale
        self.keep_log = keep_log
        self.seq = {}
        self.calls = {}
        self.log = []
        self.sleeps = []
        self.unmodelled = []
        self.streams = {}
        self.n_user = {}
        self.suppress = 0
        self.op_delays, self.coll_delays = {}, {}
        for d in delays:
            if "stream" in d:
                if int(d["rank"]) == rank:
                    self.op_delays[(d["stream"], int(d["seq"]))] = d
            else:
                self.coll_delays[(str(d["collective"]), int(d["call"]))] = d
        self._sleep = sleep
        self._saved = []

    # --- streams --------------------------------------------------------------------------------------
    def _dev(self, d=None):
        if d is None:
            return torch.cuda.current_device()
        if isinstance(d, int):
            return d
        d = torch.device(d)
        return d.index if d.index is not None else torch.cuda.current_device()

    def name_of(self, s):
        key = (s.device_index, s.stream_id)
        n = self.streams.get(key)
        if n is None:
            if s == torch.cuda.default_stream(s.device_index):
                n = f"rank{self.rank}/cuda:{s.device_index}/default"
            else:  # a stream the hook did not see made (made before it was installed, or by C++)
                n = f"rank{self.rank}/cuda:{s.device_index}/unknown{s.stream_id}"
            self.streams[key] = n
        return n

    def _made(self, s):
        i = s.device_index
        self.n_user[i] = self.n_user.get(i, 0) + 1
        self.streams[(i, s.stream_id)] = f"rank{self.rank}/cuda:{i}/stream{self.n_user[i]}"

    # --- counting ---------------------------------------------------------------------------------------
    def _count(self, stream_name, name, sleep_on, token=None):
        q = self.seq.get(stream_name, 0) + 1
        self.seq[stream_name] = q
        if self.keep_log:
            self.log.append((stream_name, q, name) if token is None else (stream_name, q, name, list(token)))
        d = self.op_delays.get((stream_name, q))
        if d is None and token is not None:
            d = self.coll_delays.get((str(token[0]), int(token[1])))
        if d is not None:
            # the sleep is a launch of its own, which delays every later launch of the host alike (simdist's
            # cost model: LAUNCH_NS): it is lengthened by that much, so the named op ends delay_ns later than
            # the ops launched after it
            cycles = max(1, int((d["delay_ns"] * self.scale + LAUNCH_NS) * SLEEP_CYCLES_PER_NS))
            with torch.cuda.stream(sleep_on):
                self._sleep(cycles)
            self.sleeps.append({"stream": stream_name, "seq": q, "op": name, "witness_op": d.get("op"),
                                "cycles": cycles, "matches": d.get("op") in (name, "collective")})

    def _token(self, key):
        n = self.calls.get(key, 0) + 1
        self.calls[key] = n
        return (key, n)

    # --- aten ops --------------------------------------------------------------------------------------
    def plan(self, func, args, kwargs):
        """[(stream, name)] simdist launches for this aten op (usually one; none for views and allocations)."""
        from simdist.faces.op_info import VIEW, op_info
        aten = torch.ops.aten
        ns = func.namespace
        if ns == "c10d":
            return []  # the collective is counted by its torch.distributed function
        if ns in ("_c10d_functional", "_c10d_functional_autograd"):
            if func not in (torch.ops._c10d_functional.wait_tensor.default,):
                self.unmodelled.append(str(func))
            return []
        cur = torch.cuda.current_stream
        ts = _flat(list(args), [])
        _flat(kwargs, ts)
        cuda = [t for t in ts if t.is_cuda]
        if func is aten._to_copy.default:
            src = args[0]
            tdev = kwargs.get("device")
            tdev = torch.device(tdev) if tdev is not None else None
            if src.is_cuda and (tdev is None or tdev.type == "cuda"):
                return [(cur(src.device.index), "_to_copy")]
            if src.is_cuda:
                return [(cur(src.device.index), "copy_d2h_async" if kwargs.get("non_blocking") else "copy_d2h")]
            if tdev is not None and tdev.type == "cuda":
                pinned = kwargs.get("non_blocking") and src.is_pinned()
                return [(cur(self._dev(tdev)), "copy_h2d_async" if pinned else "copy_h2d")]
            return []
        if func is aten.copy_.default:
            dst, src = args[0], args[1]
            nb = bool(args[2] if len(args) > 2 else kwargs.get("non_blocking", False))
            s_cuda = isinstance(src, torch.Tensor) and src.is_cuda
            if dst.is_cuda and s_cuda:
                return [(cur(src.device.index), "copy_")]
            if dst.is_cuda:
                pinned = nb and isinstance(src, torch.Tensor) and src.is_pinned()
                return [(cur(dst.device.index), "copy_h2d_async" if pinned else "copy_h2d")]
            if s_cuda:
                return [(cur(src.device.index), "copy_d2h_async" if nb and dst.is_pinned() else "copy_d2h")]
            return []
        if func is aten._local_scalar_dense.default:
            return [(cur(args[0].device.index), "item")] if args[0].is_cuda else []
        if func in _NO_LAUNCH or func in _inplace_views():
            return []  # allocations, metadata changes, stream bookkeeping (simdist/faces/rules/factories.py,
            #            metadata.py): no device work
        if func is aten.resize_.default:
            x = args[0]
            n = 1
            for d in (args[1] if len(args) > 1 else kwargs["size"]):
                n *= d
            have = x.untyped_storage().nbytes()
            if x.is_cuda and (x.storage_offset() + n) * x.element_size() > have and have:
                return [(cur(x.device.index), "resize_copy")]  # a bigger block, the old bytes copied over
            return []
        info = op_info(func)
        if not cuda:
            dev = kwargs.get("device")
            if dev is None or torch.device(dev).type != "cuda":
                return []
            if func in (aten.empty.memory_format, aten.empty_strided.default):
                return []
            return [(cur(self._dev(dev)), info.name)]
        if info.kind == VIEW or info.python_kernel is not None:
            return []
        return [(cur(cuda[0].device.index), info.name)]

    # --- collectives -------------------------------------------------------------------------------------
    def _group(self, A):
        import torch.distributed as dist
        g = A.get("group")
        return g if g is not None else dist.distributed_c10d._get_default_group()

    def _names(self, g):
        key = getattr(g, "group_name", None) or "pg"
        desc = getattr(g, "group_desc", None)
        return key, (desc if desc and desc != "undefined" else key)

    def _collective(self, fname, A):
        import torch.distributed as dist
        c10d = dist.distributed_c10d
        if fname == "batch_isend_irecv":
            for p in A["p2p_op_list"]:
                send = getattr(p.op, "__name__", "") in ("isend", "send")
                peer = p.peer if getattr(p, "peer", None) is not None else None
                self._p2p(p.group or c10d._get_default_group(), p.tensor, send, peer, None, batched=True)
            return
        g = self._group(A)
        if c10d._rank_not_in_group(g):
            return
        if fname in _P2P:
            send = _P2P[fname]
            peer = A.get("dst") if send else A.get("src")
            gpeer = A.get("group_dst") if send else A.get("group_src")
            self._p2p(g, A["tensor"], send, peer, gpeer)
            return
        key, desc = self._names(g)
        if fname == "barrier":
            ids = A.get("device_ids")
            dev = self._dev(ids[0] if ids else None)
            cur = torch.cuda.current_stream(dev)
            tok = self._token(key)
            self._count(self.name_of(cur), "zeros", cur)
            self._count(f"rank{self.rank}/nccl:{desc}", "nccl:all_reduce", cur, tok)
            return
        ts = _flat([v for k, v in A.items() if k != "group"], [])
        cuda = [t for t in ts if t.is_cuda]
        tok = self._token(key)
        if not cuda:
            return  # a gloo collective on CPU tensors: a host rendezvous, no device op (the call still counts)
        cur = torch.cuda.current_stream(cuda[0].device.index)
        stream = f"rank{self.rank}/nccl:{desc}" if A.get("async_op") else self.name_of(cur)
        self._count(stream, f"nccl:{_COLLECTIVES[fname]}", cur, tok)

    def _p2p(self, g, t, send, peer, gpeer, batched=False):
        import torch.distributed as dist
        if gpeer is not None and peer is None:
            peer = dist.get_global_rank(g, gpeer)
        key, _ = self._names(g)
        me = self.rank
        src, dst = (me, peer) if send else (peer, me)
        tok = self._token(f"p2p:{key}:{src}->{dst}")
        cur = torch.cuda.current_stream(t.device.index) if t.is_cuda else None
        if cur is None:
            return
        sk = f"p2p:{min(src, dst)}-{max(src, dst)}" + ((":send" if send else ":recv") if batched else "")
        self._count(f"rank{me}/nccl:{sk}", "nccl:p2p", cur, tok)

    # --- install / remove ------------------------------------------------------------------------------
    def _patch(self, owner, name, value):
        self._saved.append((owner, name, owner.__dict__.get(name, _MISSING) if isinstance(owner, type)
                            else getattr(owner, name)))
        setattr(owner, name, value)

    def __enter__(self):
        import torch.distributed as dist
        hook = self
        if self._sleep is None:
            self._sleep = torch.cuda._sleep
        real_sleep = torch.cuda._sleep

        def program_sleep(cycles):
            cur = torch.cuda.current_stream()
            hook._count(hook.name_of(cur), "_sleep", cur)
            return real_sleep(cycles)
        self._patch(torch.cuda, "_sleep", program_sleep)
        cls = torch.cuda.Stream
        orig_new = cls.__new__

        def new(c, *a, **k):
            s = orig_new(c, *a, **k) if orig_new is not object.__new__ else orig_new(c)
            # torch.cuda.current_stream() / default_stream() wrap an existing stream in a new Stream object
            # through this same __new__ (Stream(stream_id=..., device_index=..., device_type=...)), and
            # ExternalStream passes stream_ptr: neither makes a stream
            if "stream_id" not in k and "stream_ptr" not in k and hasattr(s, "stream_id"):
                hook._made(s)
            return s
        self._patch(cls, "__new__", new)
        c10d = dist.distributed_c10d
        for fname in list(_COLLECTIVES) + list(_P2P) + ["barrier", "batch_isend_irecv"]:
            orig = getattr(c10d, fname, None)
            if orig is None:
                continue
            w = self._wrap(fname, orig)
            self._patch(c10d, fname, w)
            if getattr(dist, fname, None) is orig:
                self._patch(dist, fname, w)
        for mod, fname in ((torch, "tensor"), (torch, "as_tensor")):
            self._patch(mod, fname, self._wrap_data_factory(getattr(mod, fname)))

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                if not hook.suppress:
                    for stream, name in hook.plan(func, args, kwargs):
                        hook._count(hook.name_of(stream), name, stream)
                return func(*args, **kwargs)
        self.mode = Mode()
        self.mode.__enter__()
        return self

    def __exit__(self, *exc):
        self.mode.__exit__(*exc)
        for owner, name, old in reversed(self._saved):
            if old is _MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, old)
        self._saved = []
        return False

    def _wrap(self, fname, orig):
        hook = self
        sig = inspect.signature(orig)

        def wrapper(*a, **k):
            if hook.suppress:
                return orig(*a, **k)
            try:
                ba = sig.bind(*a, **k)
                ba.apply_defaults()
                A = dict(ba.arguments)
            except TypeError:
                return orig(*a, **k)
            hook._collective(fname, A)
            hook.suppress += 1
            try:
                return orig(*a, **k)
            finally:
                hook.suppress -= 1
        wrapper.__name__ = getattr(orig, "__name__", fname)
        wrapper.__wrapped__ = orig
        return wrapper

    def _wrap_data_factory(self, orig):
        """torch.tensor / torch.as_tensor with a CUDA device: one host-to-device copy (simdist/faces/patches.py
        _factory_from_data); the real build converts below the dispatch mode, so it is counted here."""
        hook = self

        def make(data, *args, device=None, **kwargs):
            if hook.suppress or not _wants_cuda(device) or (isinstance(data, torch.Tensor) and data.is_cuda):
                return orig(data, *args, device=device, **kwargs)
            cur = torch.cuda.current_stream(hook._dev(device))
            hook._count(hook.name_of(cur), "copy_h2d", cur)
            hook.suppress += 1
            try:
                return orig(data, *args, device=device, **kwargs)
            finally:
                hook.suppress -= 1
        make.__name__ = getattr(orig, "__name__", "tensor")
        return make

    def summary(self):
        return {"ops": len(self.log), "streams": sorted(self.seq), "sleeps": self.sleeps,
                "unmodelled": sorted(set(self.unmodelled))}


_MISSING = object()
_aten = torch.ops.aten
_NO_LAUNCH = {_aten.empty_like.default, _aten.new_empty.default, _aten.new_empty_strided.default,
              _aten.lift_fresh.default, _aten.lift_fresh_copy.default, _aten.record_stream.default,
              _aten.is_pinned.default}
_INPLACE_VIEWS = []


def _inplace_views():
    """x.t_(), x.squeeze_(0)...: metadata changed on the host (simdist/faces/rules/metadata.py _INPLACE_VIEWS)."""
    if not _INPLACE_VIEWS:
        for name, ovs in (("as_strided_", ("default",)), ("t_", ("default",)), ("unsqueeze_", ("default",)),
                          ("squeeze_", ("default", "dim", "dims")), ("transpose_", ("default",)),
                          ("swapdims_", ("default",)), ("swapaxes_", ("default",)), ("detach_", ("default",))):
            pk = getattr(_aten, name, None)
            for ov in ovs:
                if pk is not None and hasattr(pk, ov):
                    _INPLACE_VIEWS.append(getattr(pk, ov))
        _INPLACE_VIEWS.append(None)
    return _INPLACE_VIEWS


def _wants_cuda(device):
    if device is None:
        return False
    if isinstance(device, int):
        return True
    if isinstance(device, str):
        return device.startswith("cuda")
    return getattr(device, "type", None) == "cuda"


def run_program(path, rank, delays=(), scale=1.0, keep_log=True):
    """Run one program as __main__ under the hook; returns (hook, exception or None)."""
    hook = OpHook(rank, delays, scale, keep_log)
    old_argv = sys.argv
    sys.argv = [path]
    err = None
    try:
        with hook:
            runpy.run_path(path, run_name="__main__")
    except SystemExit as e:
        if e.code not in (None, 0):
            err = e
    except BaseException as e:  # noqa: BLE001
        err = e
    finally:
        sys.argv = old_argv
    return hook, err


# ================================================================ the CPU check: the hook inside simdist

_WRAPPER = '''"""Runs a program under ci/gpu_witness.py's hook inside a simdist rank (used by --check-counts)."""
import json, os, sys
sys.path.insert(0, {root!r})
from ci.gpu_witness import run_program
target, out, delays, scale = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), float(sys.argv[4])
rank = int(os.environ["RANK"])
hook, err = run_program(target, rank, delays, scale)
with open(f"{{out}}.rank{{rank}}.json", "w") as f:
    json.dump({{"log": hook.log, "summary": hook.summary(), "error": repr(err) if err else None}}, f)
if err is not None:
    raise err
'''


def _wrapper_path(tmp):
    p = os.path.join(tmp, "hooked_program.py")
    with open(p, "w") as f:
        f.write(_WRAPPER.format(root=ROOT))
    return p


def sim_op_log(res):
    """simdist's op log: (rank, stream) -> [(seq, name)] in per-stream launch order."""
    out = {}
    for rank, _sid, sname, name, _kind, seq, _s, _e in res._trace_source[0].ops:
        out.setdefault((rank, sname), []).append((seq, name))
    for v in out.values():
        v.sort()
    return out


def hook_op_log(tmp_out, world_size):
    out, info = {}, {}
    for r in range(world_size):
        p = f"{tmp_out}.rank{r}.json"
        if not os.path.exists(p):
            info[r] = {"error": "no hook log (the rank did not finish)"}
            continue
        with open(p) as f:
            d = json.load(f)
        info[r] = d
        for entry in d["log"]:
            stream, seq, name = entry[0], entry[1], entry[2]
            if name == "_sleep":
                continue  # simdist's trace keeps no _sleep (no kernel body); it counts it, as the hook does
            out.setdefault((r, stream), []).append((seq, name))
    return out, info


def compare_logs(sim, hook):
    """None when every stream's (seq, name) list agrees, else the first difference in words."""
    for key in sorted(set(sim) | set(hook), key=str):
        a, b = sim.get(key, []), hook.get(key, [])
        if a != b:
            for i in range(max(len(a), len(b))):
                x = a[i] if i < len(a) else None
                y = b[i] if i < len(b) else None
                if x != y:
                    return (f"rank {key[0]} {key[1]}: op {i + 1}: simdist {x}, hook {y} "
                            f"(simdist {len(a)} ops, hook {len(b)})")
    return None


def run_hooked(path, world_size, delays=(), scale=1.0, tmp=None, policy=None, opts=None):
    """The program inside simdist with the hook inside it. Returns (RunResult, hook log, per-rank hook info)."""
    import tempfile

    import simdist
    tmp = tmp or tempfile.mkdtemp(prefix="gpu_witness_")
    wrapper = _wrapper_path(tmp)
    out = os.path.join(tmp, "hook")
    for r in range(world_size):
        if os.path.exists(f"{out}.rank{r}.json"):
            os.remove(f"{out}.rank{r}.json")
    with contextlib.redirect_stdout(io.StringIO()):
        res = simdist.run_script(wrapper, world_size=world_size, argv=[path, out, json.dumps(list(delays)), str(scale)],
                                 policy=policy if policy is not None else simdist.NoJitter(), **(opts or {}))
    log, info = hook_op_log(out, world_size)
    return res, log, info


def check_counts(paths_meta, witnesses=None, log=print):
    """For each program: the hook's counts against simdist's op log (no delays); and, for each hazard with a
    witness, the witness replayed through the hook's sleeps inside simdist. Returns one row per program."""
    import tempfile

    import simdist
    from simdist.properties.programs import run_options
    tmp = tempfile.mkdtemp(prefix="gpu_witness_")
    rows = []
    for m in paths_meta:
        t0 = time.perf_counter()
        opts = run_options(m)
        row = {"name": m["name"], "world_size": m["world_size"]}
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                plain = simdist.run_script(m["path"], world_size=m["world_size"], policy=simdist.NoJitter(), **opts)
            res, hlog, info = run_hooked(m["path"], m["world_size"], tmp=tmp, opts=opts)
            sim = sim_op_log(plain)
            row["sim_ops"] = sum(len(v) for v in sim.values())
            row["hook_ops"] = sum(len(v) for v in hlog.values())
            row["streams"] = len(sim)
            diff = compare_logs(sim, hlog)
            row["counts_match"] = diff is None
            if diff:
                row["first_difference"] = diff
            un = sorted({u for i in info.values() for u in (i.get("summary") or {}).get("unmodelled", [])})
            if un:
                row["unmodelled"] = un
        except Exception as e:  # noqa: BLE001
            row["counts_match"] = None
            row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
        reps = []
        for h in ((witnesses or {}).get(m["name"]) or {}).get("hazards", []):
            w = h.get("witness")
            if not w or not w["delays"]:
                continue
            # matched by kind, streams and op names: inside the hook the accesses' sites are the hook's frames
            want = (h["kind"], h["first"]["stream"], h["first"]["op"], h["second"]["stream"], h["second"]["op"])
            rep = {"kind": h["kind"], "observed": False, "by_scale": {}}
            for sc in CPU_SCALES:  # as the GPU escalates; the smallest scale that shows it is kept
                try:
                    res, _, info = run_hooked(m["path"], m["world_size"], w["delays"], sc, tmp=tmp, opts=opts)
                except Exception as e:  # noqa: BLE001
                    rep["by_scale"][str(sc)] = f"error: {type(e).__name__}: {e}"[:300]
                    continue
                hit = [x for x in res.hazards
                       if (x.kind, x.first.stream, x.first.op, x.second.stream, x.second.op) == want]
                sl = [s for i in info.values() for s in (i.get("summary") or {}).get("sleeps", [])]
                obs = bool(hit and hit[0].observed)
                rep["by_scale"][str(sc)] = obs
                rep.update(sleeps=sl, sleeps_at_named_op=bool(sl) and all(s["matches"] for s in sl))
                if obs:
                    rep.update(observed=True, scale=sc)
                    break
            reps.append(rep)
        if reps:
            row["witness_replays_through_hook"] = reps
        row["seconds"] = round(time.perf_counter() - t0, 2)
        rows.append(row)
        log(f"{m['name']}: counts {'match' if row.get('counts_match') else row.get('first_difference') or row.get('error')}"
            + (f"; witness through the hook observed {sum(r['observed'] for r in reps)}/{len(reps)}" if reps else ""))
    return rows


# ================================================================ the scenario corpus: counts on the real build

def _hooked_scenario(name, rank=0):
    from simdist.properties import scenarios as S
    S.set_salt(0)
    with OpHook(rank) as h:
        S.SCENARIOS[name].fn(delay_cycles=0)
    return [list(e) for e in h.log]


def _log_of(entries, rank=0):
    out = {}
    for e in entries:
        if e[2] != "_sleep":
            out.setdefault((rank, e[0]), []).append((e[1], e[2]))
    return out


def export_scenario_logs(path, world_size=1):
    """CPU: every scenario (properties/scenarios.py) at this world size in simdist, no jitter, with the hook inside:
    simdist's op log (what the GPU's hook must count) and whether the hook counted the same inside simdist."""
    import simdist
    from simdist.properties import scenarios as S
    out = {}
    for name in S.SCENARIOS:
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                res = simdist.run(_hooked_scenario, world_size=world_size, policy=simdist.NoJitter(), args=(name,))
        except Exception as e:  # noqa: BLE001 - e.g. point-to-point at world size 1
            out[name] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:200]}
            continue
        sim = sim_op_log(res)
        diff = compare_logs(sim, {k: v for r, ret in enumerate(res.returns) for k, v in _log_of(ret, r).items()})
        out[name] = {"sim_log": [[r, st, [list(x) for x in ops]] for (r, st), ops in sorted(sim.items())],
                     "cpu_counts_match": diff is None, "cpu_first_difference": diff}
    with open(path, "w") as f:
        json.dump({"world_size": world_size, "torch": torch.__version__, "scenarios": out}, f, indent=1)
        f.write("\n")
    return out


def gpu_scenario_counts(sim_path, out_path):
    """GPU (one process, world size 1): each scenario under the hook on the real CUDA build; its per-stream op log
    against simdist's (export_scenario_logs)."""
    import datetime

    import torch.distributed as dist
    with open(sim_path) as f:
        doc = json.load(f)
    if doc["world_size"] != 1:
        raise SystemExit("gpu_witness: the scenario count check runs at world size 1 (one process)")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29731")
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", rank=0, world_size=1, timeout=datetime.timedelta(seconds=120),
                           device_id=torch.device("cuda", 0))
    rows = {}
    for name, e in doc["scenarios"].items():
        if "error" in e:
            rows[name] = {"verdict": "not run", "why": f"simdist: {e['error']}"}
            continue
        sim = {(r, st): [tuple(x) for x in ops] for r, st, ops in e["sim_log"]}
        t0 = time.perf_counter()
        try:
            torch.cuda.synchronize()
            log = _hooked_scenario(name)
            torch.cuda.synchronize()
            diff = compare_logs(sim, _log_of(log))
            rows[name] = {"gpu_counts_match": diff is None, "gpu_first_difference": diff,
                          "cpu_counts_match": e["cpu_counts_match"], "ops": sum(len(v) for v in sim.values()),
                          "seconds": round(time.perf_counter() - t0, 4)}
        except Exception as ex:  # noqa: BLE001
            rows[name] = {"gpu_counts_match": None, "error": f"{type(ex).__name__}: {ex}"[:300]}
    dist.destroy_process_group()
    ran = [r for r in rows.values() if "gpu_counts_match" in r]
    ok = sum(r["gpu_counts_match"] is True for r in ran)
    summary = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0), "scenarios": len(rows),
               "ran": len(ran), "gpu_counts_match": ok, "ops": sum(r.get("ops", 0) for r in ran)}
    with open(out_path, "w") as f:
        json.dump({"summary": summary, "rows": rows}, f, indent=1)
    print(f"scenario op counts on the GPU equal simdist's: {ok}/{len(ran)} ({summary['ops']} ops); "
          + "; ".join(f"{n}: {r.get('gpu_first_difference') or r.get('error')}" for n, r in rows.items()
                      if r.get("gpu_counts_match") is False or r.get("error")))
    return summary


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check-counts", action="store_true", help="CPU: the hook's counts against simdist's op log")
    ap.add_argument("--export-scenario-logs", metavar="FILE", help="CPU: simdist's op log of every scenario, world "
                                                                  "size 1, and the hook's count of it inside simdist")
    ap.add_argument("--gpu-scenario-counts", nargs=2, metavar=("SIMFILE", "OUT"),
                    help="GPU: each scenario under the hook on the real build, counts against SIMFILE's")
    ap.add_argument("--dir", action="append", default=None, help="program folder(s) (default tests/corpus)")
    ap.add_argument("--witnesses", default=None, help="programs-sim JSON with witnesses (ci/gpu_programs.py)")
    ap.add_argument("--only", default="", help="comma-separated name substrings")
    ap.add_argument("--out", default=None, help="write the rows as JSON here")
    a = ap.parse_args(argv)
    from ci.source_tree import use_source_tree
    use_source_tree()
    if a.export_scenario_logs:
        out = export_scenario_logs(a.export_scenario_logs)
        ok = sum(e.get("cpu_counts_match") is True for e in out.values())
        print(f"wrote {a.export_scenario_logs}: hook counts equal simdist's in {ok}/{sum('error' not in e for e in out.values())}")
        return 0
    if a.gpu_scenario_counts:
        gpu_scenario_counts(*a.gpu_scenario_counts)
        return 0
    from simdist.properties.programs import corpus_paths, parse
    metas = [parse(p) for p in corpus_paths(*(a.dir or [os.path.join(ROOT, "tests", "corpus")]))]
    metas = [m for m in metas if m["expected"] in ("clean", "hazard") and m["nccl"] in (None, "2.8")
             and m["device_count"] is None and (not a.only or any(o in m["name"] for o in a.only.split(",")))]
    wit = None
    if a.witnesses:
        with open(a.witnesses) as f:
            wit = {k: v.get("witness_file") for k, v in json.load(f)["programs"].items()}
    rows = check_counts(metas, wit)
    ok = sum(r.get("counts_match") is True for r in rows)
    print(f"hook counts equal simdist's op log in {ok}/{len(rows)} programs")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"rows": rows}, f, indent=1)
    return 0 if ok == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())


# ================================================================ verdicts and the report (shared with ci/gpu_confirm.py)

VERDICTS = ("confirmed", "unconfirmed", "agree", "disagree", "incomplete", "not run")
VERDICT_TEXT = {
    "confirmed": "simdist: hazard; damage seen on the GPU",
    "unconfirmed": "simdist: hazard; no damage seen on the GPU (not counted as agreement)",
    "agree": "simdist: clean; correct on the GPU in every pass",
    "disagree": "simdist: clean, damaged or failing on the GPU; or simdist failed on a program the GPU ran",
    "incomplete": "no complete GPU evidence (the launch-blocking reference failed, or the job was cut short)",
    "not run": "not run on this machine",
}


def _frac(ts):
    return f"{sum(t['damaged'] for t in ts)}/{len(ts)}"


def verdict_row(row, witness_doc=None):
    """Add verdict / evidence / why to a program row (ci/gpu_programs.py assemble) from its raw trials."""
    trials = row["trials"]
    by_mode = {}
    for t in trials:
        by_mode.setdefault(t["mode"], []).append(t)
    sim = row.get("sim")
    hz = (witness_doc or {}).get("hazards", [])
    wit = [t for t in trials if t["mode"] == "witness"]
    per_hazard = []
    for i, h in enumerate(hz):
        ts = [t for t in wit if t.get("hazard") == i]
        scales = {}
        for t in ts:
            scales.setdefault(t["scale"], []).append(t)
        per_hazard.append({"kind": h["kind"], "witness": h.get("witness"), "why_no_witness": None if h.get("witness")
                           else h.get("why"), "trials": len(ts), "damaged": sum(t["damaged"] for t in ts),
                           "by_scale": {str(s): _frac(v) for s, v in sorted(scales.items())},
                           "sleeps_issued": sum(bool(t.get("sleeps")) for t in ts),
                           "sleeps_at_named_op": sum(bool(t.get("sleeps")) and all(s["matches"] for s in t["sleeps"])
                                                     for t in ts)})
    row["hazards"] = per_hazard
    row["damage_by_mode"] = {m: _frac(v) for m, v in by_mode.items()}
    dmg = [m for m, v in by_mode.items() if any(t["damaged"] for t in v)]
    ev = ", ".join(f"{m} {row['damage_by_mode'][m]}" for m in by_mode) or "-"
    row["evidence"] = ev
    if row.get("verdict") == "not run":
        return row
    if not row.get("reference_ok", True):
        if sim == "clean":
            row.update(verdict="disagree", why=f"the launch-blocking reference failed: {row.get('reference_error')}")
        else:
            row.update(verdict="incomplete", why=f"the launch-blocking reference failed: {row.get('reference_error')}")
        return row
    if sim == "clean":
        row.update(verdict="disagree" if dmg else "agree",
                   why=f"damaged or failing in: {', '.join(dmg)}" if dmg else "")
        return row
    if sim != "hazard":
        row.update(verdict="disagree", why=f"simdist: {sim} ({row.get('sim_error') or 'error'}) on a program the "
                                           "GPU ran")
        return row
    if "witness" in dmg:
        best = min((int(s) for h in per_hazard for s, f in h["by_scale"].items() if not f.startswith("0/")),
                   default=None)
        row.update(verdict="confirmed", confirmed_by=f"witness (smallest scale with damage: x{best})", why="")
        return row
    if dmg:
        row.update(verdict="confirmed", confirmed_by=f"{', '.join(dmg)} (not the witness)",
                   why="the witness schedule did not show it; " + _why_unshown(per_hazard, row))
        return row
    row.update(verdict="unconfirmed", why=_why_unshown(per_hazard, row))
    return row


def _why_unshown(per_hazard, row):
    if not per_hazard:
        return "simdist exported no witness for it"
    out = []
    for h in per_hazard:
        if h["witness"] is None:
            out.append(f"{h['kind']}: no witness ({h['why_no_witness']})")
        elif not h["witness"]["delays"]:
            out.append(f"{h['kind']}: observed in simdist with no delay at all; nothing to replay, and as written "
                       "the GPU did not show it")
        elif not h["sleeps_issued"]:
            out.append(f"{h['kind']}: the hook never reached the witness's op on the GPU "
                       f"(GPU op counts: {row.get('gpu_counts_first_difference') or 'equal to simdist'})")
        elif h["sleeps_at_named_op"] < h["sleeps_issued"]:
            out.append(f"{h['kind']}: the hook slept at an op of another name than the witness's: the GPU's op "
                       f"counts diverge from simdist's ({row.get('gpu_counts_first_difference')})")
        else:
            out.append(f"{h['kind']}: the witness's sleeps ran before the named op ({h['trials']} trials, scales "
                       f"{', '.join('x' + s for s in h['by_scale'])}) and every output equals the reference: the "
                       "damage needs more than that delay on this GPU (its ops are not simdist's cost model), or "
                       "the output does not show it")
    return "; ".join(out)


def render_verdicts(rows, extra_cols=(), witness=True):
    """The one table format of the GPU jobs: rows with name, expected, sim, sim_kinds, verdict, evidence, why."""
    n = {v: sum(r["verdict"] == v for r in rows) for v in VERDICTS}
    ran = [r for r in rows if r["verdict"] != "not run"]
    L = [f"- run: {len(ran)}; **confirmed {n['confirmed']}**, **unconfirmed {n['unconfirmed']}**, agree (clean) "
         f"{n['agree']}, **disagree {n['disagree']}**, incomplete {n['incomplete']}; not run: {n['not run']}"]
    if witness:
        L += [f"- hazards confirmed by simdist's witness schedule: "
         f"{sum(1 for r in rows if (r.get('confirmed_by') or '').startswith('witness'))}; confirmed only by another "
              f"pass: {sum(1 for r in rows if r['verdict'] == 'confirmed' and not (r.get('confirmed_by') or '').startswith('witness'))}"]
    L.append("")
    L += ["| verdict | meaning |", "|---|---|"] + [f"| {v} | {VERDICT_TEXT[v]} |" for v in VERDICTS] + [""]
    head = ["program", "world", "expected", "simdist (kinds)", "GPU verdict", "damage seen (damaged/trials by pass)"]
    head += [c for c, _ in extra_cols]
    L += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        if r["verdict"] == "not run":
            continue
        k = f" ({', '.join(r['sim_kinds'])})" if r.get("sim_kinds") else ""
        v = r["verdict"] + (f" by {r['confirmed_by']}" if r.get("confirmed_by") else "")
        cells = [r["name"], str(r.get("world_size", "")), r["expected"], f"{r['sim']}{k}",
                 f"**{v}**" if r["verdict"] in ("disagree", "unconfirmed") else v, r.get("evidence", "-")]
        cells += [str(fn(r)) for _, fn in extra_cols]
        L.append("| " + " | ".join(cells) + " |")
    for v, title in (("unconfirmed", "Unconfirmed, and why"), ("disagree", "Disagreements"),
                     ("incomplete", "Incomplete"), ("not run", "Not run, and why")):
        rs = [r for r in rows if r["verdict"] == v]
        if rs:
            L += ["", f"### {title}", ""] + [f"- {r['name']}: {r.get('why') or '-'}" for r in rs]
    return L


def write_report(rows, prefix, info, title):
    L = [f"# {title} ({info.get('date', '')})", "",
         f"{info.get('device', '')}; torch {info.get('torch', '')}, NCCL {info.get('nccl', '')}; "
         f"{info.get('seconds', 0):.0f} s ({', '.join(f'{k} {v} s' for k, v in (info.get('pass_seconds') or {}).items())}).",
         f"Programs: {', '.join(info.get('dirs', []))}; simdist's verdicts and witnesses: {info.get('sim')}; "
         f"witness scales {info.get('scales')}, {info.get('trials')} trial(s) each.", ""]
    ran = [r for r in rows if r["verdict"] != "not run"]
    cpu = sum(r.get("cpu_counts_match") is True for r in ran)
    gpu = sum(r.get("gpu_counts_match") is True for r in ran)
    L += [f"- the hook's per-stream op counts equal simdist's op log: inside simdist (CPU) {cpu}/{len(ran)}, on the "
          f"GPU (real CUDA build, plain pass) {gpu}/{len(ran)}"]
    L += render_verdicts(rows, extra_cols=(("op counts CPU / GPU", lambda r: f"{_m(r.get('cpu_counts_match'))} / "
                                                                           f"{_m(r.get('gpu_counts_match'))}"),))
    diffs = [r for r in ran if r.get("gpu_counts_match") is False]
    if diffs:
        L += ["", "### GPU op counts that differ from simdist's", ""] + [
            f"- {r['name']}: {r.get('gpu_counts_first_difference')}" for r in diffs]
    with open(prefix + ".md", "w") as f:
        f.write("\n".join(L) + "\n")
    with open(prefix + ".json", "w") as f:
        json.dump({"info": info, "rows": rows}, f, indent=1)
    print("\n".join(L))
    return not any(r["verdict"] in ("disagree", "incomplete") for r in rows)


def _m(x):
    return "match" if x is True else ("differ" if x is False else "-")
