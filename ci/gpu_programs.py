"""Run the program corpus (tests/corpus/) on real GPUs with NCCL and cross-check simdist's verdicts.

    NCCL_NVLS_ENABLE=0 python3 ci/gpu_programs.py --sim docs/gpu/programs-sim.json --out report-programs

Each program runs unmodified, one process per GPU (as torchrun would start it), in four passes:
  reference  CUDA_LAUNCH_BLOCKING=1: every launch completes before the host goes on, so no two kernels overlap
             and no race can damage anything; its output is the right answer;
  plain      as written;
  slow-side  every op issued on a non-default stream is preceded by torch.cuda._sleep (a slow side stream);
  slow-main  every op issued on the default stream is preceded by torch.cuda._sleep (a slow main stream).
A clean program must pass its own asserts and print the reference output in every pass; a hazard program is
confirmed when some pass prints something other than the reference (or fails its asserts): damage on a GPU.
simdist's verdicts (made on the CPU: `--export-sim`) are compared with both. Exit 0 when every verdict agrees.
"""
from __future__ import annotations

import argparse
import contextlib
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
from simdist.properties.programs import corpus_paths, parse  # noqa: E402  (the corpora and their docstring fields)
PASSES = ("reference", "plain", "slow-side", "slow-main")


ONLY = os.environ.get("GPU_PROGRAMS_ONLY", "")  # comma-separated name substrings (a partial re-run)


def programs(world_size):
    """The clean and hazard programs of the corpora for this world size, one GPU per rank, torch >= 2.8."""
    out = []
    for p in corpus_paths(os.path.join(ROOT, "tests", "corpus")):
        m = parse(p)
        if (m["world_size"] == world_size and m["nccl"] in (None, "2.8") and m["device_count"] is None
                and m["expected"] in ("clean", "hazard")
                and (not ONLY or any(o in m["name"] for o in ONLY.split(",")))):
            out.append(m)
    return out


# ----------------------------------------------------------------------------- simdist side (CPU)
def export_sim(path, seeds=10, world_size=2):
    import simdist
    res = {}
    for m in programs(world_size):
        kinds, errors = set(), []
        for seed in range(seeds):
            try:
                with contextlib.redirect_stdout(io.StringIO()):
                    r = simdist.run_script(m["path"], world_size=world_size, seed=seed)
                kinds |= {h.kind for h in r.hazards}
            except Exception as e:  # noqa: BLE001
                errors.append(f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
        res[m["name"]] = {"verdict": "error" if errors else ("hazard" if kinds else "clean"),
                          "kinds": sorted(kinds), "errors": errors[:1]}
    with open(path, "w") as f:
        json.dump({"seeds": seeds, "world_size": world_size, "programs": res}, f, indent=1, sort_keys=True)
    return res


# ----------------------------------------------------------------------------- GPU side
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


def _alarm(signum, frame):
    raise TimeoutError("program timed out")


def worker(rank, world_size, pass_name, out_dir, cycles, timeout, port_base):
    if pass_name == "reference":
        os.environ["CUDA_LAUNCH_BLOCKING"] = "1"
    import runpy
    import torch
    import torch.distributed as dist
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size),
                      LOCAL_WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1")
    signal.signal(signal.SIGALRM, _alarm)
    recs = []
    for i, m in enumerate(programs(world_size)):
        os.environ["MASTER_PORT"] = str(port_base + i)
        # each program gets what a fresh process has: generators at c10's default seed, default streams
        torch.manual_seed(67280421310721)
        torch.cuda.set_device(rank)
        buf = io.StringIO()
        rec = {"name": m["name"], "pass": pass_name, "rank": rank}
        t = time.perf_counter()
        slow = _Slow(pass_name == "slow-side", cycles) if pass_name.startswith("slow") else None
        signal.alarm(timeout)
        try:
            with contextlib.redirect_stdout(buf):
                if slow is not None:
                    with slow.mode:
                        runpy.run_path(m["path"], run_name="__main__")
                else:
                    runpy.run_path(m["path"], run_name="__main__")
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
        try:
            if dist.is_initialized():
                dist.destroy_process_group()
        except Exception:  # noqa: BLE001
            pass
        rec["stdout"] = buf.getvalue()[-4000:]
        rec["seconds"] = round(time.perf_counter() - t, 3)
        recs.append(rec)
        if rec.get("error", "").startswith("TimeoutError"):
            break  # the peers are out of step now: end the pass
    with open(os.path.join(out_dir, f"{pass_name}.rank{rank}.jsonl"), "w") as f:
        for r in recs:
            f.write(json.dumps(r) + "\n")


def run_pass(pass_name, world_size, out_dir, cycles, timeout, port_base):
    import torch.multiprocessing as mp
    mp.start_processes(worker, args=(world_size, pass_name, out_dir, cycles, timeout, port_base),
                       nprocs=world_size, join=True, start_method="spawn")


# ----------------------------------------------------------------------------- report
def _norm(s):
    return re.sub(r"\s+", " ", s).strip()


def assemble(out_dir, sim, world_size):
    by = {}
    for p in PASSES:
        for r in range(world_size):
            f = os.path.join(out_dir, f"{p}.rank{r}.jsonl")
            if not os.path.exists(f):
                continue
            for line in open(f):
                rec = json.loads(line)
                by.setdefault(rec["name"], {}).setdefault(p, {})[r] = rec
    rows = []
    for m in programs(world_size):
        ev = by.get(m["name"], {})
        ref = ev.get("reference", {})
        ref_ok = len(ref) == world_size and all(x["ok"] for x in ref.values())
        damaged, failed, ran = [], [], []
        for p in PASSES[1:]:
            recs = ev.get(p, {})
            if len(recs) < world_size:
                continue
            ran.append(p)
            if not all(x["ok"] for x in recs.values()):
                failed.append(p)
            elif ref_ok and any(_norm(recs[r]["stdout"]) != _norm(ref[r]["stdout"]) for r in recs):
                damaged.append(p)
        s = (sim or {}).get(m["name"], {})
        sim_v = s.get("verdict")
        if not ref_ok or len(ran) < len(PASSES) - 1:
            gpu = "incomplete"
        elif m["expected"] == "clean":
            gpu = "clean" if not damaged and not failed else "damaged"
        else:
            gpu = "damaged" if damaged or failed else "not shown"
        if m["expected"] == "clean":
            agree = sim_v == "clean" and gpu == "clean"
        else:  # a race the GPU did not show in these passes is not a disagreement: timing can hide it
            agree = sim_v == "hazard" and gpu in ("damaged", "not shown")
        rows.append({"name": m["name"], "expected": m["expected"], "kinds": m["kinds"], "sim": sim_v,
                     "sim_kinds": s.get("kinds", []), "gpu": gpu, "damaged_in": damaged, "failed_in": failed,
                     "agree": agree, "reference_error": None if ref_ok else
                     next((x.get("error") for x in ref.values() if not x["ok"]), "missing")})
    return rows


def write_report(rows, prefix, info):
    n = len(rows)
    agree = sum(r["agree"] for r in rows)
    hz = [r for r in rows if r["expected"] == "hazard"]
    shown = sum(r["gpu"] == "damaged" for r in hz)
    clean = [r for r in rows if r["expected"] == "clean"]
    clean_ok = sum(r["gpu"] == "clean" for r in clean)
    L = [f"# Program corpus on real GPUs ({info.get('date', '')})", "",
         f"{info.get('device', '')}; torch {info.get('torch', '')}, NCCL {info.get('nccl', '')}; "
         f"{info.get('seconds', 0):.0f} s.", "",
         f"- verdicts agreeing with simdist: **{agree}/{n}**",
         f"- clean programs correct on the GPU in every pass (their asserts and the reference output): "
         f"{clean_ok}/{len(clean)}",
         f"- hazard programs whose damage showed on the GPU (output differs from the launch-blocking reference "
         f"or asserts fail): {shown}/{len(hz)}", "",
         "| program | expected | simdist (kinds) | GPU | damage in passes |", "|---|---|---|---|---|"]
    for r in rows:
        k = f" ({', '.join(r['sim_kinds'])})" if r["sim_kinds"] else ""
        d = ", ".join(r["damaged_in"] + [f"{p} (assert)" for p in r["failed_in"]]) or "-"
        mark = "" if r["agree"] else " **DISAGREE**"
        L.append(f"| {r['name']} | {r['expected']} | {r['sim']}{k} | {r['gpu']}{mark} | {d} |")
    with open(prefix + ".md", "w") as f:
        f.write("\n".join(L) + "\n")
    with open(prefix + ".json", "w") as f:
        json.dump({"info": info, "rows": rows}, f, indent=1)
    print("\n".join(L))
    return agree == n


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--export-sim", help="CPU side: run the corpus in simdist and write its verdicts here")
    ap.add_argument("--sim", default=os.path.join(ROOT, "docs", "gpu", "programs-sim.json"))
    ap.add_argument("--out", default="report-programs", help="report prefix (OUT.md, OUT.json; evidence in OUT.d/)")
    ap.add_argument("--nproc", type=int, default=0)
    ap.add_argument("--cycles", type=int, default=20_000_000, help="torch.cuda._sleep cycles of the slow passes")
    ap.add_argument("--timeout", type=int, default=60, help="seconds per program")
    ap.add_argument("--passes", default=",".join(PASSES))
    ap.add_argument("--assemble", action="store_true", help="only write the report from OUT.d/ evidence")
    a = ap.parse_args(argv)
    if a.export_sim:
        res = export_sim(a.export_sim, world_size=a.nproc or 2)
        print(f"wrote {a.export_sim}: {len(res)} programs")
        return 0
    import torch
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    world = a.nproc or torch.cuda.device_count()
    if world < 2:
        print("gpu_programs: needs 2 GPUs", file=sys.stderr)
        return 2
    out_dir = a.out + ".d"
    os.makedirs(out_dir, exist_ok=True)
    t = time.perf_counter()
    for i, p in enumerate([] if a.assemble else a.passes.split(",")):
        t0 = time.perf_counter()
        try:
            run_pass(p, world, out_dir, a.cycles, a.timeout, 29600 + 200 * i)
        except Exception as e:  # noqa: BLE001 - a pass that died leaves partial evidence; the report says so
            print(f"pass {p} failed: {e}", file=sys.stderr)
        print(f"pass {p}: {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    took = os.path.join(out_dir, "seconds.txt")
    if not a.assemble:
        with open(took, "w") as f:
            f.write(f"{time.perf_counter() - t:.1f}")
    seconds = float(open(took).read()) if os.path.exists(took) else 0.0
    sim = json.load(open(a.sim))["programs"] if os.path.exists(a.sim) else {}
    rows = assemble(out_dir, sim, world)
    info = {"date": time.strftime("%Y-%m-%d"), "torch": torch.__version__,
            "nccl": ".".join(map(str, torch.cuda.nccl.version())), "device":
            f"{world}x {torch.cuda.get_device_name(0)}", "seconds": seconds}
    return 0 if write_report(rows, a.out, info) else 1


if __name__ == "__main__":
    sys.exit(main())
