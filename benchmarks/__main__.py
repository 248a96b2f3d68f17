"""Benchmarks (not timed tests): every figure is a rate or a ratio measured in this one run.

python -m benchmarks [--quick] [--out benchmarks/results.json]
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


def per_op_us(n_ops=3000):
    def fn():
        x = torch.ones(16, device="cuda")
        for _ in range(n_ops):
            x = x + 1.0
        return x.sum().item()
    simdist.run(fn)  # warm caches
    t = time.perf_counter()
    simdist.run(fn)
    return (time.perf_counter() - t) / n_ops * 1e6


def pipeline_ratio(n=4096, ops=20, reps=3):
    def body(x):
        for i in range(ops // 2):
            x = x * 1.0001
            x = x + 0.5
        return x

    def sim():
        x = torch.ones(n, n, device="cuda")
        y = body(x)
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


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    ap.add_argument("--quick", action="store_true", help="smaller sizes, skip the xdist comparison")
    ap.add_argument("--out", default="benchmarks/results.json")
    a = ap.parse_args(argv)
    res = {"date": time.strftime("%Y-%m-%d"), "torch": torch.__version__, "python": platform.python_version(),
           "machine": f"{platform.machine()} x{os.cpu_count()} cores"}
    rows = []
    us = per_op_us()
    res["per_op_us"] = us
    rows.append(("dispatch cost per small simulated op", f"{us:.1f} us", "<= 20 us"))
    s, e = pipeline_ratio(n=2048 if a.quick else 4096)
    res["pipeline_4096_sim_s"], res["pipeline_4096_eager_s"], res["pipeline_ratio"] = s, e, s / e
    rows.append(("20-op fp32 pipeline 4096x4096, simulated / eager", f"{s / e:.2f}x ({s:.2f}s vs {e:.2f}s)",
                 "<= 1.5x"))
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
    res["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    rows.append(("peak RSS of this benchmark process", f"{res['peak_rss_mb']:.0f} MB", ""))
    if not a.quick:
        for n in (1, 2):
            res[f"xdist_{n}_s"] = xdist(n)
            rows.append((f"engine+distributed tests, pytest -n {n}", f"{res[f'xdist_{n}_s']:.1f} s", ""))
    w = max(len(r[0]) for r in rows)
    print(f"simdist benchmarks {res['date']} torch {res['torch']} {res['machine']}")
    for name, val, goal in rows:
        print(f"  {name:<{w}}  {val:<28} {goal}")
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
