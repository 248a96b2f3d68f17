"""Benchmarks (not timed tests): every figure is a rate or a ratio measured in this one run.

python -m simdist.benchmarks [--quick] [--out benchmarks/results.json]
python -m simdist.benchmarks --refit-only   # issue 13's figures side by side: small op, 20-op pipeline, refit
                                            # schedules per CPU second per core, simulated / eager refit, the
                                            # hunt's largest cell and `simdist hunt` end to end (~6 min)

Every figure is stored with the load average (os.getloadavg(), 1 minute) before and after it was measured: this
machine is shared, and a figure means little without it.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time

import torch
import torch.distributed as dist

import simdist


def per_op_us(n_ops=3000, reps=5):
    def fn():
        x = torch.ones(16, device="cuda")
        for _ in range(n_ops):
            x = x + 1.0
        return x.sum().item()
    simdist.run(fn)  # warm caches
    best = float("inf")
    for _ in range(reps):  # best of reps, as timeit reports: the least disturbed run
        t = time.perf_counter()
        simdist.run(fn)
        best = min(best, (time.perf_counter() - t) / n_ops * 1e6)
    return best


def overhead_table(sizes=(64, 512, 4096)):
    """Simulated / eager for the 20-op pipeline at small, medium and large sizes."""
    return {n: pipeline_ratio(n=n, reps=3 if n > 512 else 5) for n in sizes}


def dispatch_us(n_ops=3000, reps=3):
    """Host-side cost per small op inside a rank (dispatch, allocation, HB checks, queueing), best of reps;
    the kernels themselves run later, when the simulated clock reaches them."""
    def fn():
        x = torch.ones(16, device="cuda")
        t = time.perf_counter()
        for _ in range(n_ops):
            x = x + 1.0
        return (time.perf_counter() - t) / n_ops * 1e6
    simdist.run(fn)
    return min(simdist.run(fn).returns[0] for _ in range(reps))


def pipeline_ratio(n=4096, ops=20, reps=3):
    def body(x):
        for i in range(ops // 2):
            x = x * 1.0001
            x = x + 0.5
        return x

    def sim():
        body(torch.ones(n, n, device="cuda"))
        torch.cuda.synchronize()
        return None
    simdist.run(sim)
    best_sim = min(_timed(lambda: simdist.run(sim)) for _ in range(reps))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # simdist runs ops on one intra-op thread: compare like with like
    try:
        body(torch.ones(n, n))
        best_eager = min(_timed(lambda: body(torch.ones(n, n))) for _ in range(reps))
    finally:
        torch.set_num_threads(threads)
    return best_sim, best_eager


def _timed(f):
    t = time.perf_counter()
    f()
    return time.perf_counter() - t


def incident_program():
    r = dist.get_rank()
    g = torch.Generator().manual_seed(r)
    data = torch.randn(256, 256, generator=g).to(torch.float8_e4m3fn).cuda()
    scale_inv = (torch.rand(2, 2, generator=g) + 0.5).cuda()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        w = (data.view(2, 128, 2, 128).float() * scale_inv[:, None, :, None]).reshape(256, 256).to(torch.bfloat16)
    out = torch.empty(512, 256, dtype=torch.bfloat16, device="cuda")
    dist.all_gather_into_tensor(out, w)
    return out


def time_to_detect():
    code = ("import time; t0=time.perf_counter(); import simdist, benchmarks.__main__ as b; t1=time.perf_counter();"
            "r=simdist.run(b.incident_program, world_size=2); t2=time.perf_counter();"
            "assert r.hazards; print(t1-t0, t2-t1)")
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    total = time.perf_counter() - t
    imp, run = map(float, out.stdout.split())
    return total, imp, run


def schedules_per_sec(n=200):
    t = time.perf_counter()
    found = 0
    for seed in range(n):
        found += bool(simdist.run(incident_program, world_size=2, seed=seed).hazards)
    dt = time.perf_counter() - t
    assert found == n
    return n / dt


REFIT_BENCH = dict(tp=2, pp=1, recipe="blockwise-fp32", fp8_param=True, steps=1, layers=2)
HUNT_CELL = dict(tp=2, pp=2, recipe="blockwise-fp32", fp8_param=True, steps=2, layers=2)


def refit_throughput(n=5, kw=None, world=2):
    """Refit schedules per second per core: CPU seconds (this process, every rank thread) per simulated run of
    the fakes' refit (default: TP=2, 2-layer blockwise-FP8 model, one GRPO step), after one warm-up run.
    Returns (runs per CPU second, wall seconds per run, simulated ops per run)."""
    from simdist.properties import hunt
    kw = dict(REFIT_BENCH if kw is None else kw)
    res = simdist.run(hunt.refit_program, world_size=world, seed=0, kwargs=kw, nccl=hunt.NCCL)
    ops = sum(1 for e in (res.trace["traceEvents"] if isinstance(res.trace, dict) else res.trace)
              if e.get("ph") != "M")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        c, t = time.process_time(), time.perf_counter()
        for seed in range(n):
            simdist.run(hunt.refit_program, world_size=world, seed=seed, kwargs=kw, nccl=hunt.NCCL)
        cpu, wall = (time.process_time() - c) / n, (time.perf_counter() - t) / n
    finally:
        torch.set_num_threads(threads)
    return 1 / cpu, wall, ops


def _eager_rank(rank, world, port, kw, n, q):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world, init_method=f"tcp://127.0.0.1:{port}")
    try:
        from simdist.properties import hunt
        hunt.refit_program(**kw)  # warm-up
        c, t = time.process_time(), time.perf_counter()
        for _ in range(n):
            hunt.refit_program(**kw)
        q.put((rank, (time.perf_counter() - t) / n, (time.process_time() - c) / n))
    finally:
        dist.destroy_process_group()


def refit_eager(n=5, kw=None, world=2):
    """The same refit run eagerly on the CPU without simulation: one process per rank over gloo (the fakes'
    CPU path, fakes/cuda.py), one intra-op thread each. Returns (CPU seconds per run summed over the ranks,
    wall seconds per run of the slowest rank)."""
    import multiprocessing as mp
    import socket
    kw = dict(REFIT_BENCH if kw is None else kw)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    procs = [ctx.Process(target=_eager_rank, args=(r, world, port, kw, n, q)) for r in range(world)]
    for p in procs:
        p.start()
    got = [q.get(timeout=600) for _ in procs]
    for p in procs:
        p.join()
    return sum(c for _, _, c in got), max(w for _, w, _ in got)


def hunt_end_to_end():
    """`python -m simdist.properties.hunt` (its defaults) in a fresh process: wall seconds and CPU seconds of
    the process tree (the hunt's worker processes included)."""
    import tempfile
    trace = os.path.join(tempfile.mkdtemp(prefix="simdist-bench-"), "hunt-witness.trace.json")
    t = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run([sys.executable, "-m", "simdist.properties.hunt", "--json", "--trace", trace],
                         capture_output=True, text=True,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = time.perf_counter() - t
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    cells = len(json.loads(out.stdout)["cells"]) if out.returncode in (0, 1) and out.stdout else None
    return wall, cpu, cells


def _load():
    return round(os.getloadavg()[0], 2)


def refit_section(res, rows, quick=False, hunt=True):
    """Issue 13's acceptance figures, measured side by side in this run: the fakes' refit in schedules per CPU
    second per core (one intra-op thread: a simulated run uses one core), the same refit run eagerly over gloo
    (CPU seconds summed over its two processes) and the ratio, the hunt's largest cell, and the hunt end to end."""
    n = 3 if quick else 10
    load0 = _load()
    rt, wall, ops = refit_throughput(n)
    eager_cpu, eager_wall = refit_eager(n)
    res.update(refit_schedules_per_cpu_s=rt, refit_sim_wall_s=wall, refit_sim_ops=ops,
               refit_eager_cpu_s=eager_cpu, refit_eager_wall_s=eager_wall,
               refit_sim_over_eager_cpu=(1 / rt) / eager_cpu, refit_sim_over_eager_wall=wall / eager_wall,
               refit_load=[load0, _load()])
    rows.append(("refit schedules per CPU second per core, fakes TP=2, 2-layer FP8, 1 step",
                 f"{rt:.1f}/s ({1 / rt * 1e3:.0f} ms CPU, {ops} ops; load {load0}-{_load()})", ">= 50/core"))
    rows.append(("  same refit: simulated / eager CPU over gloo (CPU s; wall s)",
                 f"{(1 / rt) / eager_cpu:.2f}x; {wall / eager_wall:.2f}x ({1 / rt * 1e3:.0f} vs "
                 f"{eager_cpu * 1e3:.0f} ms CPU; {wall * 1e3:.0f} vs {eager_wall * 1e3:.0f} ms)", "<= 3x"))
    load0 = _load()
    ht, hwall, hops = refit_throughput(3 if quick else 5, HUNT_CELL, world=8)
    res.update(hunt_cell_runs_per_cpu_s=ht, hunt_cell_wall_s=hwall, hunt_cell_ops=hops, hunt_cell_load=[load0, _load()])
    rows.append(("  the hunt's largest cell: TP2 PP2 DP2, 2 layers, 2 steps",
                 f"{1 / ht:.2f} s CPU per run ({hops} ops; load {load0}-{_load()})", ""))
    if hunt:
        load0 = _load()
        hw, hcpu, cells = hunt_end_to_end()
        res.update(hunt_wall_s=hw, hunt_cpu_s=hcpu, hunt_cells=cells, hunt_load=[load0, _load()])
        rows.append((f"`python -m simdist.properties.hunt` end to end ({cells} cells)",
                     f"{hw:.1f} s wall, {hcpu:.1f} s CPU (load {load0}-{_load()})", "<= 60 s"))


def refit_scaling(world):
    """Wall time and peak RSS of the fakes refit (bf16, TP x PP x DP) at a world size, in a fresh process: run
    twice, the first run's time (with the one-time work of a process's first run: torch._dynamo's import, the
    fake CUDA guard's load) and the second's (what every later run of a test session costs)."""
    code = ("import time, resource, simdist; from simdist.properties import hunt;"
            "tp=min(4, {w}); pp=2 if {w} >= 8 else 1; dp={w}//(tp*pp);"
            "from simdist.fakes import nemo_rl, megatron_core as mc;"
            "cfg=mc.TransformerConfig(hidden_size=512, num_attention_heads=8, num_query_groups=4, kv_channels=128,"
            " ffn_hidden_size=512, num_layers=2, vocab_size=512);"
            "f=lambda: nemo_rl.grpo_refit_loop(cfg, tp=tp, pp=pp, steps=1, compute_metric=False);"
            "t=time.perf_counter(); simdist.run(f, world_size={w}); cold=time.perf_counter()-t;"
            "t=time.perf_counter(); simdist.run(f, world_size={w}); dt=time.perf_counter()-t;"
            "print(cold, dt, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss/1024)").format(w=world)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if out.returncode:
        return None, None, out.stderr.strip().splitlines()[-1][:120]
    cold, dt, rss = map(float, out.stdout.split()[-3:])
    return cold, dt, rss


def scaling(world):
    def fn():
        me = dist.get_rank()
        tp = 2
        groups = [dist.new_group([b, b + 1]) for b in range(0, world, tp)]
        g = groups[me // tp]
        shard = torch.full((256, 128), float(me), device="cuda")
        full = [torch.empty_like(shard) for _ in range(tp)]
        dist.all_gather(full, shard, group=g)
        w = torch.cat(full, dim=1)
        dist.all_reduce(w)
        return w[0, 0].item()
    t = time.perf_counter()
    simdist.run(fn, world_size=world)
    return time.perf_counter() - t


def xdist(workers):
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", str(workers), "-p", "no:cacheprovider",
                    "tests/test_distributed.py", "tests/test_engine_rules.py"], capture_output=True, check=True,
                   cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return time.perf_counter() - t


# --- fuzz: time to find (issue 16) -------------------------------------------------------------------------------
def fuzz_time_to_find(quick=False, only=None):
    """For each fault switch of the fakes (FAULTS, read now) and each sync of the incident kernel: examples and
    seconds until the fuzz properties first fail from an empty database (hazard report; damaged values), and the
    example Hypothesis shrinks it to (simdist.properties.timetofind.measure)."""
    from simdist.properties import strategies as S
    from simdist.properties import timetofind
    targets = None
    if only:
        targets = [("sync" if n in S.SYNCS else "fault", n) for n in only]
    find_s, shrink_s = (30.0, 30.0) if quick else (120.0, 90.0)
    rows = timetofind.measure(targets, seeds=(0,) if quick else (0, 1, 2), find_s=find_s, shrink_s=shrink_s)
    return rows, timetofind.format_table(rows), find_s


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m simdist.benchmarks", description=__doc__)
    ap.add_argument("--quick", action="store_true", help="smaller sizes, skip the xdist comparison")
    ap.add_argument("--out", default="benchmarks/results.json")
    ap.add_argument("--no-hunt", action="store_true", help="skip the hunt end to end (minutes)")
    ap.add_argument("--refit-only", action="store_true",
                    help="only issue 13's figures (small op, pipeline, refit, simulated / eager, hunt), merged into "
                         "the results file")
    ap.add_argument("--fuzz-only", nargs="?", const="all", default=None, metavar="NAMES",
                    help="only the fuzz time-to-find section (all targets, or comma-separated fault switches / syncs)")
    ap.add_argument("--no-fuzz", action="store_true", help="skip the fuzz time-to-find section (~15 min)")
    a = ap.parse_args(argv)
    if a.fuzz_only:
        return _fuzz_section(a, None if a.fuzz_only == "all" else a.fuzz_only.split(","))
    res = {"date": time.strftime("%Y-%m-%d"), "torch": torch.__version__, "python": platform.python_version(),
           "machine": f"{platform.machine()} x{os.cpu_count()} cores"}
    rows = []
    load0 = _load()
    us = per_op_us()
    res["per_op_us"] = us
    dus = dispatch_us()
    res["dispatch_us"] = dus
    res["per_op_load"] = [load0, _load()]
    rows.append(("small simulated op, end to end (dispatch + run; best of 5)", f"{us:.1f} us (load {load0}-{_load()})",
                 "<= 20 us"))
    rows.append(("  of which host-side dispatch per op (best of 3)", f"{dus:.1f} us", "<= 20 us"))
    load0 = _load()
    for n, (s, e) in overhead_table((64, 512, 2048) if a.quick else (64, 512, 4096)).items():
        res[f"pipeline_{n}_sim_s"], res[f"pipeline_{n}_eager_s"], res[f"pipeline_{n}_ratio"] = s, e, s / e
        rows.append((f"20-op fp32 pipeline {n}x{n}, simulated / eager", f"{s / e:.2f}x ({s * 1e3:.1f} ms vs "
                     f"{e * 1e3:.1f} ms)", "<= 1.5x (large)" if n >= 2048 else ""))
    res["pipeline_load"] = [load0, _load()]
    if a.refit_only:
        try:
            refit_section(res, rows, a.quick, hunt=not a.no_hunt)
        except Exception as e:  # noqa: BLE001
            rows.append(("refit schedules per second", f"failed: {type(e).__name__}: {e}", ""))
        return _report(a, res, rows, merge=True)
    total, imp, run = time_to_detect()
    res["detect_total_s"], res["detect_import_s"], res["detect_after_imports_s"] = total, imp, run
    rows.append(("time to detect the incident race (after imports)", f"{run:.3f} s (process total {total:.2f} s)",
                 "< 1 s"))
    sps = schedules_per_sec(50 if a.quick else 200)
    res["schedules_per_s"] = sps
    rows.append(("schedules explored per second (TP=2 refit kernel)", f"{sps:.0f}/s", ">= 200/core"))
    for w in ((2, 8, 16) if a.quick else (2, 8, 16, 32, 64)):
        dt = scaling(w)
        res[f"scaling_{w}_s"] = dt
        rows.append((f"refit-like all_gather+all_reduce, {w} ranks", f"{dt:.2f} s", "64 ranks < 10 s"))
    try:
        refit_section(res, rows, a.quick, hunt=not a.no_hunt)
    except Exception as e:  # noqa: BLE001
        rows.append(("refit schedules per second", f"failed: {type(e).__name__}: {e}", ""))
    for w in ((2, 8) if a.quick else (2, 4, 8, 16, 32, 64)):
        cold, dt, rss = refit_scaling(w)
        if dt is None:
            rows.append((f"fakes refit, {w} ranks", f"failed: {rss}", ""))
            continue
        res[f"refit_scaling_{w}_s"], res[f"refit_scaling_{w}_first_run_s"] = dt, cold
        res[f"refit_scaling_{w}_rss_mb"] = rss
        rows.append((f"fakes refit (bf16, TPxPPxDP), {w} ranks: a later run (the process's first)",
                     f"{dt:.2f} s ({cold:.2f} s), peak RSS {rss:.0f} MB", "64 ranks < 10 s"))
    from .transports import measure as transports
    for k, v in transports(3 if a.quick else 7).items():
        res[k] = v
    rows.append(("2-rank torchrun script, rank threads / rank processes: in a warm process; from a cold shell",
                 f"{res['script_2_ranks_threads_warm_s']:.3f} / {res['script_2_ranks_processes_warm_s']:.3f} s; "
                 f"{res['script_2_ranks_threads_cli_s']:.2f} / {res['script_2_ranks_processes_cli_s']:.2f} s",
                 "<= 1 s"))
    res["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    rows.append(("peak RSS of this benchmark process", f"{res['peak_rss_mb']:.0f} MB", ""))
    if not a.quick:
        for n in (1, 2):
            res[f"xdist_{n}_s"] = xdist(n)
            rows.append((f"engine+distributed tests, pytest -n {n}", f"{res[f'xdist_{n}_s']:.1f} s", ""))
    if not a.no_fuzz:
        frows, table, find_s = fuzz_time_to_find(a.quick)
        res["fuzz_time_to_find"] = _fuzz_json(frows)
        found = sum(all(x["found"] for x in r["detect"]) for r in frows)
        rows.append((f"fuzz: fault switches / syncs found from an empty database (<= {find_s:.0f} s each)",
                     f"{found}/{len(frows)}", "all, within 2 min"))
    return _report(a, res, rows, table=None if a.no_fuzz else table)


def _report(a, res, rows, table=None, merge=False):
    """Print the table and write the results file (`merge`: into the figures already there)."""
    w = max(len(r[0]) for r in rows)
    print(f"simdist benchmarks {res['date']} torch {res['torch']} {res['machine']}")
    for name, val, goal in rows:
        print(f"  {name:<{w}}  {val:<28} {goal}")
    if table is not None:
        print("\nfuzz: time to find, from an empty database (README, Benchmarks, Fuzzing)\n" + table)
    if merge and os.path.exists(a.out):
        with open(a.out) as f:
            old = json.load(f)
        res["refit_only_date"] = res.pop("date")  # the other figures keep the date of the run that measured them
        old.update(res)
        res = old
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1, default=str)
    print(f"wrote {a.out}")


def _fuzz_json(rows):
    out = []
    for r in rows:
        row = {"kind": r["kind"], "name": r["name"], "seeds": r["seeds"]}
        for what in ("detect", "damage"):
            row[what] = []
            for x in r[what]:
                x = dict(x)
                if "case" in x:  # one line each: the configuration, and the case as compact JSON
                    from simdist.properties.campaign import describe
                    x["config"], x["case"] = describe(x["case"]), json.dumps(x["case"], separators=(",", ":"))
                if "schedule" in x:
                    x["nonzero_delays"] = x["schedule"].nonzero_delays
                    x["schedule"] = str(x["schedule"])
                row[what].append(x)
        out.append(row)
    return out


def _fuzz_section(a, only):
    """--fuzz-only: run the section alone and merge it into the results file."""
    frows, table, _ = fuzz_time_to_find(a.quick, only)
    print(table)
    res = {}
    if os.path.exists(a.out):
        with open(a.out) as f:
            res = json.load(f)
    res["fuzz_time_to_find"] = _fuzz_json(frows)
    res["fuzz_date"] = time.strftime("%Y-%m-%d")
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1, default=str)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
