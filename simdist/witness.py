"""Witnesses: for each hazard, the smallest delay schedule that makes its damage show (`Hazard.observed`).

simdist reports a race whether or not a schedule damaged the values. A witness is the schedule that does:
the cost model with no jitter (`NoJitter`) plus a few ops made slower by `Targeted` delays, found by search:

1. the base run (no jitter, no delay). A hazard already observed there has the empty witness.
2. candidates, nearest first: the first access's op; the ops launched before it on its stream (a slow
   predecessor makes it late too); the ops launched before the second access on the second's stream. A
   collective is delayed by its rendezvous key (group, call number), as `Targeted` delays collectives.
3. each candidate alone at the largest delay of the ladder; those that make the hazard observed are walked down
   the ladder, and the best one's delay is bisected between the last rung that failed and the first that
   worked. If no single op does it, pairs of the first candidates are tried the same way.
4. the smallest set wins: fewest ops, then the smallest total delay.

A hazard that no schedule of up to two delayed ops (each at most the ladder's top) makes observed is exported
with "witness": null and the reason. Every trial is kept in the JSON ("trials": delays and whether it showed).

`simdist run TARGET ... --export-witness FILE` writes them (format: `export`'s docstring); ci/gpu_witness.py
replays them on real GPUs with torch.cuda._sleep before the named op.
"""
from __future__ import annotations

import contextlib
import io
import json
import shlex
import time

from .engine.cost import SLEEP_CYCLES_PER_NS
from .engine.policies import NoJitter, Targeted

FORMAT = "simdist-witness/1"
LADDER_NS = (2_000, 10_000, 50_000, 200_000, 1_000_000, 5_000_000)
PRED_DEPTH = 3  # ops before the first (and before the second) access that are tried
BISECT_STEPS = 4
PAIR_CANDIDATES = 4


def _quiet(call):
    with contextlib.redirect_stdout(io.StringIO()):
        return call()


class _OpIndex:
    """(rank, stream, seq) -> (name, kind, start, end) of every executed op of a run, from its trace source."""

    def __init__(self, res):
        self.ops = {}
        self.by_stream = {}
        for rank, _sid, sname, name, kind, seq, start, end in res._trace_source[0].ops:
            k = (rank, sname, seq)
            self.ops[k] = (name, kind, start, end)
            self.by_stream.setdefault((rank, sname), []).append(seq)
        for v in self.by_stream.values():
            v.sort()
        self.tokens = sorted((k for k in res.schedule if len(k) == 2), key=lambda k: (str(k[0]), k[1]))

    def mirrors(self, key):
        """The op of the same stream role, launch index and name on every other rank."""
        rank, stream, seq = key
        name = self.ops.get(key, ("?",))[0]
        role = _role(stream)
        return [k for k, v in self.ops.items() if k[0] != rank and k[2] == seq and v[0] == name
                and _role(k[1]) == role]

    def last_before(self, t, n):
        """On every rank, the n kernels (not collectives) that ended last at or before virtual time t."""
        out = []
        for r in sorted({k[0] for k in self.ops}):
            ks = [k for k, v in self.ops.items() if k[0] == r and v[3] <= t and not v[0].startswith("nccl:")]
            out += sorted(ks, key=lambda k: self.ops[k][3], reverse=True)[:n]
        return out

    def before(self, rank, stream, seq, n):
        seqs = [s for s in self.by_stream.get((rank, stream), []) if s < seq]
        return [(rank, stream, s) for s in reversed(seqs[-n:])]


def _role(stream):
    """A stream's name without its rank and device: rank1/cuda:1/stream2 -> stream2, rank0/nccl:pg -> nccl:pg."""
    parts = str(stream).split("/")
    return "/".join(p for p in parts[1:] if not p.startswith("cuda:")) or str(stream)


def _find(res, key):
    for h in res.hazards:
        if h.key == key:
            return h
    return None


class Search:
    """The witness search for the hazards of one program. runner(policy) -> RunResult."""

    def __init__(self, runner, ladder=LADDER_NS, max_runs=200):
        self.runner = runner
        self.ladder = tuple(sorted(ladder))
        self.max_runs = max_runs
        self.runs = 0
        self.cache = {}
        self.base = None
        self.idx = None

    def run(self, delays):
        k = tuple(sorted(delays.items(), key=repr))
        r = self.cache.get(k)
        if r is None:
            self.runs += 1
            r = self.cache[k] = _quiet(lambda: self.runner(Targeted(dict(delays), NoJitter())))
        return r

    def observed(self, key, delays, trials):
        try:
            res = self.run(delays)
        except Exception as e:  # noqa: BLE001 - a delay can turn a race into a crash: that is not a witness
            trials.append({"delays": _jkeys(delays), "observed": False,
                           "error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:200]})
            return False
        h = _find(res, key)
        ok = bool(h is not None and h.observed)
        trials.append({"delays": _jkeys(delays), "observed": ok, **({} if h is not None else {"hazard": "absent"})})
        return ok

    def start(self):
        self.base = _quiet(lambda: self.runner(NoJitter()))
        self.idx = _OpIndex(self.base)
        return self.base

    # --- one hazard --------------------------------------------------------------------------------
    def candidates(self, h):
        idx = self.idx
        out = []

        def add(k):
            if k not in out:
                out.append(k)

        a, b = tuple(h.first_op_key), tuple(h.second_op_key)
        for op_key in [a] + (idx.before(*a, PRED_DEPTH) if a else []):
            if op_key in idx.ops and idx.ops[op_key][0].startswith("nccl:"):
                for t in idx.tokens:  # a collective: delayed by its rendezvous key
                    add(t)
            elif op_key in idx.ops:
                add(op_key)
        if b and not str(b[1]).endswith("/host") and b[1] != (a[1] if a else None):
            for op_key in idx.before(*b, PRED_DEPTH):
                if idx.ops.get(op_key, ("",))[0].startswith("nccl:"):
                    for t in idx.tokens:
                        add(t)
                else:
                    add(op_key)
        # the same ops on the other ranks (a hazard merged over ranks names one rank's ops; another rank's may be
        # the one whose bytes differ), and, when an access is a collective, the ops each rank ran just before it
        # started (a collective reads its inputs once every rank has started it: a late peer makes it late)
        for k in list(out):
            if len(k) == 3:
                for k2 in idx.mirrors(k):
                    add(k2)
        for k in (a, b):
            if k and k in idx.ops and idx.ops[k][0].startswith("nccl:"):
                for k2 in idx.last_before(idx.ops[k][2], 2):
                    add(k2)
        return out

    def _walk(self, key, keys, trials):
        """The smallest ladder rung (then bisected) at which delaying every op of `keys` by it shows the damage,
        or None."""
        top = self.ladder[-1]
        if not self.observed(key, {k: top for k in keys}, trials):
            return None
        lo, hi = 0, top
        for d in self.ladder:
            if d >= top:
                break
            if self.runs >= self.max_runs:
                break
            if self.observed(key, {k: d for k in keys}, trials):
                hi = d
                break
            lo = d
        for _ in range(BISECT_STEPS):
            if self.runs >= self.max_runs or hi - lo <= max(500, hi // 8):
                break
            mid = (lo + hi) // 2
            if self.observed(key, {k: mid for k in keys}, trials):
                hi = mid
            else:
                lo = mid
        return hi

    def witness(self, h):
        """The entry for hazard h of the run being explained (matched by its key in the base run)."""
        key = h.key
        base_h = _find(self.base, key)
        entry = _describe(h)
        trials = []
        entry["trials"] = trials
        if base_h is None:
            entry.update(witness=None, why="the hazard does not occur in the run without jitter (its accesses "
                                           "depend on the schedule: allocator reuse after record_stream, polling)")
            return entry
        if base_h.observed:
            entry.update(witness=_schedule(self.idx, {}), why="observed with no delay: the cost model's own "
                                                              "timing damages the values")
            trials.append({"delays": [], "observed": True})
            return entry
        cands = self.candidates(base_h)
        entry["candidates"] = [_jkey(k) for k in cands]
        best = None  # (n ops, total delay, {key: ns})
        for k in cands:
            if self.runs >= self.max_runs:
                break
            d = self._walk(key, [k], trials)
            if d is not None and (best is None or (1, d) < best[:2]):
                best = (1, d, {k: d})
        if best is None:
            firsts = cands[:PAIR_CANDIDATES]
            for i in range(len(firsts)):
                for j in range(i + 1, len(firsts)):
                    if self.runs >= self.max_runs:
                        break
                    pair = [firsts[i], firsts[j]]
                    d = self._walk(key, pair, trials)
                    if d is not None and (best is None or (2, 2 * d) < best[:2]):
                        best = (2, 2 * d, {k: d for k in pair})
        if best is None:
            why = (f"no delay of up to {self.ladder[-1] / 1e3:.0f} us on one of {len(cands)} candidate op(s), or on two of "
                   f"the first {min(len(cands), PAIR_CANDIDATES)}, damaged the values")
            if not cands:
                why = "no op to delay: the accesses are not ops of the run's log"
            if self.runs >= self.max_runs:
                why += f" (search stopped at its budget of {self.max_runs} runs)"
            why += ("; the race is real (happens-before), but its damage needs more than the delay of a few ops, or "
                    "the racing accesses move equal bytes")
            entry.update(witness=None, why=why)
            return entry
        entry.update(witness=_schedule(self.idx, best[2]), why=f"smallest of {len(trials)} trial schedules")
        return entry


def _jkey(k):
    return list(k)


def _jkeys(delays):
    return [[*_jkey(k), int(d)] for k, d in sorted(delays.items(), key=repr)]


def _describe(h):
    def acc(a, key):
        return {"rank": a.rank, "stream": a.stream, "seq": a.seq, "op": a.op, "write": a.is_write,
                "shape": list(a.shape), "dtype": a.dtype, "site": list(a.site), "key": list(key) if key else None}
    return {"kind": h.kind, "observed_in_run": bool(h.observed), "count": h.count,
            "first": acc(h.first, h.first_op_key), "second": acc(h.second, h.second_op_key)}


def _schedule(idx, delays):
    """A witness as JSON: the delayed ops, each named by rank, stream, per-stream launch index and op name."""
    ops = []
    for k, ns in sorted(delays.items(), key=repr):
        if len(k) == 3:
            name, kind, _, _ = idx.ops.get(k, ("?", "?", 0, 0))
            ops.append({"rank": k[0], "stream": k[1], "seq": k[2], "op": name, "kind": kind, "delay_ns": int(ns),
                        "sleep_cycles": int(ns * SLEEP_CYCLES_PER_NS), "key": list(k)})
        else:  # a collective's rendezvous key: (group key, call number on that group)
            ops.append({"collective": str(k[0]), "call": int(k[1]), "op": "collective", "kind": "collective",
                        "delay_ns": int(ns), "sleep_cycles": int(ns * SLEEP_CYCLES_PER_NS), "key": list(k)})
    return {"base_policy": "none", "delays": ops, "total_delay_ns": int(sum(delays.values()))}


def targeted(witness):
    """The simdist policy of a witness (as `export` wrote it): Targeted over NoJitter."""
    return Targeted({tuple(d["key"]): int(d["delay_ns"]) for d in witness["delays"]}, NoJitter())


def replay_commands(replay, witness):
    """The `simdist run` command that replays a witness (when it is one kernel delay: --delay-op), and the Python
    call that replays any witness."""
    if witness is None:
        return None, None
    base = replay
    for flag in (" --policy ", " --delays "):  # the witness's base is the cost model: --policy none
        if flag in base:
            head, _, tail = base.partition(flag)
            base = head + (" " + tail.split(" ", 1)[1] if " " in tail else "")
    cli = None
    ks = witness["delays"]
    tail = ""
    if " -- " in base:
        base, _, rest = base.partition(" -- ")
        tail = " -- " + rest
    if not ks:
        cli = f"{base} --policy none{tail}"
    elif len(ks) == 1 and "stream" in ks[0]:
        d = ks[0]
        op = shlex.quote(",".join(str(d[k]) for k in ("rank", "stream", "seq", "delay_ns")))
        cli = f"{base} --policy none --delay-op {op}{tail}"
    py = ("simdist.Targeted({" + ", ".join(f"{tuple(d['key'])!r}: {d['delay_ns']}" for d in ks) + "}, "
          "simdist.NoJitter())")
    return cli, py


def find(runner, result=None, *, ladder=LADDER_NS, max_runs=200):
    """Witness entries for the hazards of `result` (a RunResult of this program; None: the base run's).
    runner(policy) -> RunResult re-runs the same program under another policy."""
    t0 = time.perf_counter()
    s = Search(runner, ladder, max_runs)
    base = s.start()
    hazards = (result if result is not None else base).hazards
    entries = [s.witness(h) for h in hazards]
    return entries, {"runs": s.runs + 1, "seconds": round(time.perf_counter() - t0, 2)}


def export(path, result, entries, stats, target=None, world_size=None, extra=None):
    """Write the witness file. Format (FORMAT = "simdist-witness/1"):

    {"format", "target", "world_size", "nccl", "replay" (the run's own replay command), "search": {"runs",
     "seconds", "ladder_ns"}, "hazards": [{
        "kind", "observed_in_run", "count",
        "first"/"second": {"rank", "stream", "seq" (per-stream launch index), "op", "write", "shape", "dtype",
                           "site": [file, line], "key"},
        "witness": null | {"base_policy": "none", "total_delay_ns", "delays": [
              {"rank", "stream", "seq", "op", "kind", "delay_ns", "sleep_cycles", "key"}        (a kernel or copy)
            | {"collective": group key, "call": n, "op": "collective", "delay_ns", "sleep_cycles", "key"}]},
        "why", "replay" (simdist run command, when the witness is expressible with --delay-op), "replay_python"
        (the simdist policy), "candidates", "trials": [{"delays": [[key..., ns], ...], "observed"}]}]}

    sleep_cycles = delay_ns x 1.98 (simdist.engine.cost.SLEEP_CYCLES_PER_NS: torch.cuda._sleep's clock). A clean
    program exports "hazards": [].
    """
    for e in entries:
        e["replay"], e["replay_python"] = replay_commands(result.replay, e.get("witness"))
    doc = {"format": FORMAT, "target": target, "world_size": world_size or result.world_size, "nccl": result.nccl,
           "replay": result.replay, "search": dict(stats, ladder_ns=list(LADDER_NS)), "hazards": entries}
    if extra:
        doc.update(extra)
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    return doc


def export_from_cli(a, res, script, fn, args, kwargs, options):
    """`simdist run ... --export-witness FILE`: re-run the same target under witness schedules and write FILE."""
    import simdist
    from .launcher import under_torchrun
    if under_torchrun():
        import sys
        print("simdist run: --export-witness is not available under torchrun (run `simdist run` directly: the "
              "search re-runs the program many times); no witness file written", file=sys.stderr)
        return None
    opts = {k: v for k, v in options.items() if k != "policy"}
    ws = a.world_size or 1
    if a.transport:
        opts["transport"] = a.transport

    def runner(policy):
        if script:
            return simdist.run_script(a.target, argv=a.args, world_size=ws, policy=policy, **opts)
        if a.spawn:
            return simdist.spawn(fn, args=args, nprocs=ws, kwargs=kwargs, policy=policy, **opts)
        return simdist.run(fn, world_size=ws, args=args, kwargs=kwargs, policy=policy, **opts)

    entries, stats = find(runner, res)
    doc = export(a.export_witness, res, entries, stats, target=a.target, world_size=ws)
    n = sum(e["witness"] is not None for e in entries)
    print(f"witness: {a.export_witness}: {len(entries)} hazard(s), {n} with a witness schedule "
          f"({stats['runs']} runs, {stats['seconds']} s)")
    return doc
