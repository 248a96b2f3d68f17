"""Run a folder of programs (the corpus format: simdist/properties/programs.py) on real GPUs with NCCL and check
simdist's verdicts against what the GPU shows, hazards through simdist's own witness schedules.

    python ci/gpu_programs.py --export-sim docs/gpu/programs-sim.json [--dir DIR ...]       # CPU, simdist
    NCCL_NVLS_ENABLE=0 python3 ci/gpu_programs.py --sim docs/gpu/programs-sim.json --out report-programs [--dir DIR]

CPU side (--export-sim): every program of the folders (default tests/corpus; any folder of programs in the format
works: tests/corpus/incidents, a user's own) whose docstring expects clean or hazard and whose NCCL profile is the
GPU's (2.8 or unnamed), in simdist: seeds 0..9 for the verdict, then for each hazard its witness
(simdist/witness.py: the smallest Targeted delay schedule that makes it observed), simdist's op log of the run
without jitter (what ci/gpu_witness.py's hook must count on the GPU), and the hook's own check inside simdist
(its counts equal that op log; the witness replayed through its sleeps is observed).

GPU side, one process per rank (as torchrun starts them), programs of world size <= the GPUs (one GPU per rank:
NCCL); each program unmodified, in two process passes:
  reference  CUDA_LAUNCH_BLOCKING=1: no two kernels overlap, no race can damage anything: the right answer;
  run        plain     as written, under the counting hook (its per-stream op log is compared with simdist's);
             slow-side / slow-main  torch.cuda._sleep before every op on a non-default / the default stream;
             witness   each hazard's witness: the hook sleeps delay_ns x 1.98 x SCALE cycles on the named
                       stream before the named op (SCALE 1, 10, 100: a GPU is not simdist's cost model), TRIALS each.
Before each run, device memory the allocator released is filled with NaN bytes (--poison-mb), as simdist's fresh
memory is, so that a race reading a new block does not see the previous run's bytes. A trial is damaged when a
rank's output differs from the reference's or the program fails (its asserts).
Verdicts, one table format with ci/gpu_confirm.py (ci/gpu_witness.py render_verdicts):
  confirmed    simdist: hazard; damage seen on the GPU (by the witness, or only by another pass: said which);
  unconfirmed  simdist: hazard; no damage seen, listed with why (no witness; the hook did not reach the named op;
               the witness ran but the outputs equal the reference): never counted as agreement;
  agree        simdist: clean; the GPU correct in every pass;
  disagree     simdist: clean; damaged or failing on the GPU (or simdist: error while the GPU ran it).
Programs that need more GPUs than the machine has are listed as not run, with why. Every trial's raw result
(stdout, error, seconds, sleeps issued) is in OUT.json; the evidence files are in OUT.d/.
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import io
import json
import os
import re
import signal
import sys
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from ci.source_tree import use_source_tree  # noqa: E402

use_source_tree()
from simdist.properties.programs import corpus_paths, parse, run_options  # noqa: E402

SCALES = (1, 10, 100)
ONLY = os.environ.get("GPU_PROGRAMS_ONLY", "")  # comma-separated name substrings (a partial re-run)


def programs(dirs, world_sizes=None):
    """The clean and hazard programs of the folders for the GPU's NCCL semantics (2.8 or unnamed), one GPU per
    rank (no DEVICE_COUNT), optionally only those of the given world sizes."""
    out = []
    for p in corpus_paths(*dirs):
        m = parse(p)
        if (m["nccl"] in (None, "2.8") and m["expected"] in ("clean", "hazard")
                and (world_sizes is None or m["world_size"] in world_sizes)
                and (not ONLY or any(o in m["name"] for o in ONLY.split(",")))):
            out.append(m)
    return out


def _rel(p):
    p = os.path.abspath(p)
    return os.path.relpath(p, ROOT) if p.startswith(ROOT + os.sep) else p


# ============================================================================ simdist side (CPU)
class _Hazards:
    def __init__(self, res, hazards):
        self.hazards, self.replay, self.nccl, self.world_size = hazards, res.replay, res.nccl, res.world_size


def export_sim(path, dirs, seeds=10, log=print):
    import simdist
    from ci import gpu_witness as gw
    from simdist import witness
    res_all = {}
    t_all = time.perf_counter()
    for m in programs(dirs):
        t0 = time.perf_counter()
        ws, opts = m["world_size"], run_options(m)
        kinds, errors, seen, first = set(), [], {}, None
        for seed in range(seeds):
            try:
                with contextlib.redirect_stdout(io.StringIO()):
                    r = simdist.run_script(m["path"], world_size=ws, seed=seed, **opts)
                first = first or r
                kinds |= {h.kind for h in r.hazards}
                for h in r.hazards:
                    seen.setdefault(h.key, h)
            except Exception as e:  # noqa: BLE001
                errors.append(f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
        rec = {"path": _rel(m["path"]), "world_size": ws, "expected": m["expected"], "expected_kinds": m["kinds"],
               "device_count": m["device_count"], "seeds": seeds,
               "verdict": "error" if errors else ("hazard" if kinds else "clean"), "kinds": sorted(kinds),
               "errors": errors[:1]}
        if not errors and m["device_count"] is None:
            def runner(policy, m=m, ws=ws, opts=opts):
                return simdist.run_script(m["path"], world_size=ws, policy=policy, **opts)
            try:
                with contextlib.redirect_stdout(io.StringIO()):
                    base = simdist.run_script(m["path"], world_size=ws, policy=simdist.NoJitter(), **opts)
                rec["op_log"] = {str(r): {} for r in range(ws)}
                for (rk, stream), ops in gw.sim_op_log(base).items():
                    rec["op_log"][str(rk)][stream] = [[q, n] for q, n in ops]
                if seen:
                    entries, stats = witness.find(runner, _Hazards(first, list(seen.values())))
                    doc = witness.export(os.devnull, first, entries, stats, target=_rel(m["path"]), world_size=ws)
                    rec["witness_file"] = doc
                chk = gw.check_counts([m], {m["name"]: rec.get("witness_file")}, log=lambda s: None)[0]
                rec["hook_check"] = {k: v for k, v in chk.items() if k not in ("name", "world_size")}
            except Exception as e:  # noqa: BLE001
                rec["witness_error"] = f"{type(e).__name__}: {e}"[:300]
        rec["seconds"] = round(time.perf_counter() - t0, 2)
        res_all[m["name"]] = rec
        wf = rec.get("witness_file") or {}
        n_w = sum(h["witness"] is not None for h in wf.get("hazards", []))
        log(f"{m['name']}: {rec['verdict']} {rec['kinds'] or ''} witnesses {n_w}/{len(wf.get('hazards', []))} "
            f"hook counts {'match' if (rec.get('hook_check') or {}).get('counts_match') else 'DIFFER'} "
            f"({rec['seconds']} s)")
    import torch
    doc = {"generated": time.strftime("%Y-%m-%d %H:%M:%S"), "torch": torch.__version__, "seeds": seeds,
           "dirs": [_rel(d) for d in dirs], "seconds": round(time.perf_counter() - t_all, 1), "programs": res_all}
    with open(path, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
        f.write("\n")
    return res_all


# ============================================================================ GPU side
class _Slow:
    """A dispatch mode that puts torch.cuda._sleep before every CUDA op issued on the chosen kind of stream."""

    def __init__(self, side, cycles):
        import torch
        from torch.utils._python_dispatch import TorchDispatchMode
        outer = self

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                if outer._cuda_op(args, kwargs):
                    cur = torch.cuda.current_stream()
                    if (cur != torch.cuda.default_stream()) == side:
                        torch.cuda._sleep(cycles)
                return func(*args, **kwargs)
        self.mode = Mode()

    def __enter__(self):
        self.mode.__enter__()
        return self

    def __exit__(self, *exc):
        return self.mode.__exit__(*exc)

    @staticmethod
    def _cuda_op(args, kwargs):
        import torch
        dev = kwargs.get("device")
        if dev is not None and torch.device(dev).type == "cuda":
            return True
        for a in list(args) + list(kwargs.values()):
            if isinstance(a, torch.Tensor) and a.is_cuda:
                return True
            if isinstance(a, (list, tuple)) and any(isinstance(x, torch.Tensor) and x.is_cuda for x in a):
                return True
        return False


def jobs_for(pass_name, metas, sim, trials, scales):
    """The runs of one pass, identical on every rank (each rank runs the same sequence, as NCCL needs)."""
    out = []
    for m in metas:
        if pass_name == "reference":
            out.append({"name": m["name"], "path": m["path"], "mode": "reference"})
            continue
        for mode in ("plain", "slow-side", "slow-main"):
            out.append({"name": m["name"], "path": m["path"], "mode": mode})
        wf = (sim.get(m["name"]) or {}).get("witness_file") or {}
        for hi, h in enumerate(wf.get("hazards", [])):
            w = h.get("witness")
            if not w or not w["delays"]:
                continue
            for sc in scales:
                for t in range(trials):
                    out.append({"name": m["name"], "path": m["path"], "mode": "witness", "hazard": hi,
                                "delays": w["delays"], "scale": sc, "trial": t})
    return out


def _alarm(signum, frame):
    raise TimeoutError("program timed out")


def poison_device(mb):
    """Fill device memory the caching allocator gave back with 0xFF bytes (NaN), as simdist's fresh memory is.

    Every program of a pass runs in the same process: without this, a racing read of a new block would see the
    bytes the previous run of the same program left there, often the right answer, and hide the damage."""
    import torch
    if mb <= 0:
        return
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    try:
        free, _ = torch.cuda.mem_get_info()
        b = torch.empty(min(free // 2, mb << 20), dtype=torch.uint8, device="cuda")
        b.fill_(0xFF)
        del b
        torch.cuda.synchronize()
    except Exception:  # noqa: BLE001 - best effort
        pass
    torch.cuda.empty_cache()


def worker(rank, world_size, pass_name, out_dir, jobs, cycles, timeout, port_base, poison_mb=4096):
    if pass_name == "reference":
        os.environ["CUDA_LAUNCH_BLOCKING"] = "1"
    import runpy

    import torch
    import torch.distributed as dist

    from ci.gpu_witness import OpHook
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size),
                      LOCAL_WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1")
    signal.signal(signal.SIGALRM, _alarm)
    f = open(os.path.join(out_dir, f"{pass_name}.ws{world_size}.rank{rank}.jsonl"), "w")
    for i, job in enumerate(jobs):
        os.environ["MASTER_PORT"] = str(port_base + i % 20000)
        torch.manual_seed(67280421310721)  # what a fresh process has: c10's default seed
        torch.cuda.set_device(rank)
        # what a fresh process has: no garbage of the previous program (freed by a collection in the middle of
        # this one, it moved q35's memory_allocated() deltas on 2026-12-02) and no cached pinned host blocks
        # (reused, they still held the right answer, hiding a host read that races a D2H copy)
        gc.collect()
        torch.cuda.synchronize()
        empty_host_cache = getattr(torch._C, "_host_emptyCache", None)
        if empty_host_cache is not None:
            empty_host_cache()
        poison_device(poison_mb)
        buf = io.StringIO()
        rec = {k: v for k, v in job.items() if k not in ("path", "delays")}
        rec.update(rank=rank, world_size=world_size)
        mode = job["mode"]
        hook = None
        if mode in ("plain", "witness"):
            hook = OpHook(rank, job.get("delays", ()), job.get("scale", 1), keep_log=mode == "plain")
        ctx = hook if hook is not None else (_Slow(mode == "slow-side", cycles) if mode.startswith("slow")
                                             else contextlib.nullcontext())
        old_argv = sys.argv
        sys.argv = [job["path"]]
        t = time.perf_counter()
        signal.alarm(timeout)
        try:
            with contextlib.redirect_stdout(buf):
                with ctx:
                    runpy.run_path(job["path"], run_name="__main__")
            torch.cuda.synchronize()
            rec["ok"] = True
        except SystemExit as e:
            rec["ok"] = e.code in (None, 0)
            if not rec["ok"]:
                rec["error"] = f"SystemExit({e.code!r})"
        except BaseException as e:  # noqa: BLE001
            rec["ok"] = False
            rec["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
            rec["tb"] = traceback.format_exc()[-1500:]
        finally:
            signal.alarm(0)
            sys.argv = old_argv
        rec["seconds"] = round(time.perf_counter() - t, 4)
        try:
            if dist.is_initialized():
                dist.destroy_process_group()
        except Exception:  # noqa: BLE001
            pass
        rec["stdout"] = buf.getvalue()[-4000:]
        if hook is not None:
            rec["hook"] = hook.summary()
            if mode == "plain":
                log = {}
                for e in hook.log:
                    if e[2] != "_sleep":
                        log.setdefault(e[0], []).append([e[1], e[2]])
                rec["op_log"] = log
        f.write(json.dumps(rec) + "\n")
        f.flush()
        if rec.get("error", "").startswith("TimeoutError"):
            break  # the peers are out of step now: end the pass
    f.close()


def run_pass(pass_name, world_size, out_dir, jobs, cycles, timeout, port_base, poison_mb=4096):
    import torch.multiprocessing as mp
    mp.start_processes(worker, args=(world_size, pass_name, out_dir, jobs, cycles, timeout, port_base, poison_mb),
                       nprocs=world_size, join=True, start_method="spawn")


# ============================================================================ report
def _norm(s):
    return re.sub(r"\s+", " ", s).strip()


def _read(out_dir, pass_name, ws):
    recs = []
    for r in range(ws):
        p = os.path.join(out_dir, f"{pass_name}.ws{ws}.rank{r}.jsonl")
        if os.path.exists(p):
            with open(p) as f:
                recs += [json.loads(line) for line in f if line.strip()]
    return recs


def _sim_log_diff(sim_log, gpu_logs):
    """None when the GPU hook's per-stream op log equals simdist's on every rank, else the first difference."""
    for r, g in sorted(gpu_logs.items()):
        s = sim_log.get(str(r), {})
        for stream in sorted(set(s) | set(g)):
            a = [tuple(x) for x in s.get(stream, [])]
            b = [tuple(x) for x in g.get(stream, [])]
            if a != b:
                i = next(i for i in range(max(len(a), len(b))) if (a[i:i + 1] or [None]) != (b[i:i + 1] or [None]))
                return (f"rank {r} {stream}: op {i + 1}: simdist {a[i] if i < len(a) else None}, GPU hook "
                        f"{b[i] if i < len(b) else None} (simdist {len(a)} ops, GPU {len(b)})")
    return None


def assemble(out_dir, sim, metas, not_run):
    from ci.gpu_witness import verdict_row
    rows = []
    for ws in sorted({m["world_size"] for m in metas}):
        ref = {}
        for x in _read(out_dir, "reference", ws):
            ref.setdefault(x["name"], {})[x["rank"]] = x
        runs = {}
        for x in _read(out_dir, "run", ws):
            runs.setdefault(x["name"], []).append(x)
        for m in [m for m in metas if m["world_size"] == ws]:
            s = sim.get(m["name"]) or {}
            rref = ref.get(m["name"], {})
            ref_ok = len(rref) == ws and all(x["ok"] for x in rref.values())
            trials = []
            for x in runs.get(m["name"], []):
                damaged = (not x["ok"]) or (ref_ok and _norm(x["stdout"]) != _norm(rref[x["rank"]]["stdout"]))
                trials.append({k: x.get(k) for k in ("mode", "hazard", "scale", "trial", "rank", "ok", "error",
                                                     "seconds")} | {"damaged": damaged,
                                                                    "sleeps": (x.get("hook") or {}).get("sleeps"),
                                                                    "stdout_tail": x["stdout"][-300:]})
            plain = [x for x in runs.get(m["name"], []) if x["mode"] == "plain"]
            gpu_diff = _sim_log_diff(s.get("op_log") or {}, {x["rank"]: x.get("op_log") or {} for x in plain}) \
                if plain and s.get("op_log") is not None else "no simdist op log"
            row = {"name": m["name"], "world_size": ws, "expected": m["expected"], "sim": s.get("verdict"),
                   "sim_kinds": s.get("kinds", []), "reference_ok": ref_ok,
                   "reference_error": None if ref_ok else next((x.get("error") for x in rref.values()
                                                               if not x["ok"]), "missing"),
                   "gpu_counts_match": gpu_diff is None, "gpu_counts_first_difference": gpu_diff,
                   "cpu_counts_match": (s.get("hook_check") or {}).get("counts_match"),
                   "reference_seconds": [x["seconds"] for x in rref.values()], "trials": trials}
            rows.append(verdict_row(row, s.get("witness_file")))
    for m, why in not_run:
        s = sim.get(m["name"]) or {}
        rows.append({"name": m["name"], "world_size": m["world_size"], "expected": m["expected"],
                     "sim": s.get("verdict"), "sim_kinds": s.get("kinds", []), "verdict": "not run", "why": why,
                     "trials": []})
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--export-sim", help="CPU side: run the programs in simdist and write verdicts and witnesses")
    ap.add_argument("--sim", default=os.path.join(ROOT, "docs", "gpu", "programs-sim.json"))
    ap.add_argument("--dir", action="append", default=None,
                    help="a folder of programs in the corpus format (repeatable; default tests/corpus)")
    ap.add_argument("--out", default="report-programs", help="report prefix (OUT.md, OUT.json; evidence in OUT.d/)")
    ap.add_argument("--nproc", type=int, default=0, help="GPUs to use (default: all visible)")
    ap.add_argument("--cycles", type=int, default=20_000_000, help="torch.cuda._sleep cycles of the slow passes")
    ap.add_argument("--trials", type=int, default=2, help="trials of each witness at each scale")
    ap.add_argument("--scales", default=",".join(map(str, SCALES)), help="witness delay scales")
    ap.add_argument("--timeout", type=int, default=60, help="seconds per program run")
    ap.add_argument("--poison-mb", type=int, default=4096, help="device memory filled with NaN bytes before each "
                                                                "run (0: none)")
    ap.add_argument("--seeds", type=int, default=10, help="simdist seeds per program (--export-sim)")
    ap.add_argument("--assemble", action="store_true", help="only write the report from OUT.d/ evidence")
    ap.add_argument("--merge-sim", nargs="+", metavar=("INTO", "FROM"),
                    help="merge the programs of --export-sim files FROM... into INTO (exports made in parts)")
    a = ap.parse_args(argv)
    dirs = [os.path.abspath(d) for d in (a.dir or [os.path.join(ROOT, "tests", "corpus")])]
    if a.merge_sim:
        into, *parts = a.merge_sim
        with open(into) as f:
            doc = json.load(f)
        for p in parts:
            with open(p) as f:
                part = json.load(f)
            doc["programs"].update(part["programs"])
            doc["seconds"] = round(doc.get("seconds", 0) + part.get("seconds", 0), 1)
        doc.setdefault("parts", []).extend(_rel(p) for p in parts)
        with open(into, "w") as f:
            json.dump(doc, f, indent=1, sort_keys=True)
            f.write("\n")
        print(f"merged {len(parts)} part(s) into {into}: {len(doc['programs'])} programs")
        return 0
    if a.export_sim:
        res = export_sim(a.export_sim, dirs, seeds=a.seeds)
        print(f"wrote {a.export_sim}: {len(res)} programs")
        return 0
    import torch

    from ci.gpu_witness import write_report
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    gpus = a.nproc or torch.cuda.device_count()
    if gpus < 1:
        print("gpu_programs: no GPU", file=sys.stderr)
        return 2
    sim = json.load(open(a.sim))["programs"] if os.path.exists(a.sim) else {}
    metas, not_run = [], []
    for m in programs(dirs):
        if m["device_count"] is not None:
            not_run.append((m, f"needs {m['device_count']} GPUs in one process (DEVICE_COUNT)"))
        elif m["world_size"] > gpus:
            not_run.append((m, f"world size {m['world_size']}: NCCL needs one GPU per rank, this machine has {gpus}"))
        else:
            metas.append(m)
    out_dir = a.out + ".d"
    os.makedirs(out_dir, exist_ok=True)
    scales = [int(x) for x in a.scales.split(",") if x]
    t = time.perf_counter()
    pass_seconds = {}
    for ws in sorted({m["world_size"] for m in metas}):
        group = [m for m in metas if m["world_size"] == ws]
        for i, p in enumerate([] if a.assemble else ("reference", "run")):
            jobs = jobs_for(p, group, sim, a.trials, scales)
            t0 = time.perf_counter()
            try:
                run_pass(p, ws, out_dir, jobs, a.cycles, a.timeout, 29600 + 2000 * i + 5000 * ws, a.poison_mb)
            except Exception as e:  # noqa: BLE001 - a pass that died leaves partial evidence; the report says so
                print(f"pass {p} (world size {ws}) failed: {e}", file=sys.stderr)
            pass_seconds[f"{p}.ws{ws}"] = round(time.perf_counter() - t0, 1)
            print(f"pass {p} world size {ws}: {len(jobs)} runs, {pass_seconds[f'{p}.ws{ws}']} s", file=sys.stderr,
                  flush=True)
    took = os.path.join(out_dir, "seconds.json")
    if not a.assemble:
        with open(took, "w") as f:
            json.dump({"total": round(time.perf_counter() - t, 1), "passes": pass_seconds}, f)
    secs = json.load(open(took)) if os.path.exists(took) else {"total": 0, "passes": {}}
    rows = assemble(out_dir, sim, metas, not_run)
    info = {"date": time.strftime("%Y-%m-%d"), "torch": torch.__version__,
            "nccl": ".".join(map(str, torch.cuda.nccl.version())), "device":
            f"{gpus}x {torch.cuda.get_device_name(0)}", "seconds": secs["total"], "pass_seconds": secs["passes"],
            "sim": _rel(a.sim), "dirs": [_rel(d) for d in dirs], "scales": scales, "trials": a.trials,
            "slow_cycles": a.cycles, "poison_mb": a.poison_mb}
    ok = write_report(rows, a.out, info, title="Program corpus on real GPUs, hazards through simdist's witnesses")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
