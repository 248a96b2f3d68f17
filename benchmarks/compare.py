"""The hot path of two versions side by side, in one run: the small-op end-to-end cost and the 20-op pipeline's
simulated / eager ratio of this tree and of an earlier commit (checked out in a temporary git worktree),
measured alternately in fresh processes so that load changes hit both alike.

    python -m simdist.benchmarks.compare REV [--rounds 3] [--refit]

--refit adds the fakes' refit: schedules per CPU second (TP=2, 2-layer FP8, 1 step: benchmarks' refit_throughput,
10 runs a round) and the 64-rank bf16 refit's wall time (benchmarks' refit_scaling). Each tree runs its own
simdist, fakes and properties. Each figure is the best over the rounds (as timeit reports: the least disturbed run).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PROBE = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
import torch, simdist
assert simdist.__file__.startswith(sys.argv[1]), simdist.__file__
N = 3000
def small():
    x = torch.ones(16, device="cuda")
    for _ in range(N):
        x = x + 1.0
    return x.sum().item()
def pipeline(n, ops=20):
    x = torch.ones(n, n, device="cuda")
    for _ in range(ops // 2):
        x = x * 1.0001
        x = x + 0.5
    torch.cuda.synchronize()
def eager(n, ops=20):
    x = torch.ones(n, n)
    for _ in range(ops // 2):
        x = x * 1.0001
        x = x + 0.5
def best(f, reps):
    out = []
    for _ in range(reps):
        t = time.perf_counter(); f(); out.append(time.perf_counter() - t)
    return min(out)
simdist.run(small)
per_op = best(lambda: simdist.run(small), 5) / N * 1e6
ratios = {}
for n in (64, 512, 4096):
    simdist.run(pipeline, args=(n,))
    sim = best(lambda: simdist.run(pipeline, args=(n,)), 3)
    torch.set_num_threads(1)  # simdist runs kernels on one intra-op thread: like with like
    eager(n)
    ratios[n] = sim / best(lambda: eager(n), 3)
print(json.dumps({"per_op_us": per_op, "pipeline_ratio": ratios}))
"""


REFIT_PROBE = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
import torch, simdist
assert simdist.__file__.startswith(sys.argv[1]), simdist.__file__
simdist.__path__.append(sys.argv[1])  # simdist.fakes / .properties from this tree's fakes/, properties/ (package-dir)
from simdist.properties import hunt
from simdist.fakes import nemo_rl, megatron_core as mc
if sys.argv[2] == "scale64":  # first in a fresh process, as refit_scaling measures it (lazy imports included)
    cfg = mc.TransformerConfig(hidden_size=512, num_attention_heads=8, num_query_groups=4, kv_channels=128,
                               ffn_hidden_size=512, num_layers=2, vocab_size=512)
    t = time.perf_counter()
    simdist.run(lambda: nemo_rl.grpo_refit_loop(cfg, tp=4, pp=2, steps=1, compute_metric=False), world_size=64)
    print(json.dumps({"refit_64_wall_s": time.perf_counter() - t}))
else:
    kw = dict(tp=2, pp=1, recipe="blockwise-fp32", fp8_param=True, steps=1, layers=2)
    simdist.run(hunt.refit_program, world_size=2, seed=0, kwargs=kw, nccl=hunt.NCCL)
    torch.set_num_threads(1)
    c = time.process_time()
    for seed in range(10):
        simdist.run(hunt.refit_program, world_size=2, seed=seed, kwargs=kw, nccl=hunt.NCCL)
    print(json.dumps({"refit_per_cpu_s": 10 / (time.process_time() - c)}))
"""


def _measure(tree, probe=PROBE, *args):
    out = subprocess.run([sys.executable, "-c", probe, tree, *args], capture_output=True, text=True, check=True,
                         env=dict(os.environ, OMP_NUM_THREADS="1"))
    return json.loads(out.stdout.strip().splitlines()[-1])


def compare(rev, rounds=3, refit=False):
    with tempfile.TemporaryDirectory() as tmp:
        old = os.path.join(tmp, "tree")
        subprocess.run(["git", "-C", ROOT, "worktree", "add", "--detach", "-q", old, rev], check=True)
        try:
            results = {"before": [], "after": []}
            for _ in range(rounds):
                for k, tree in (("before", old), ("after", ROOT)):
                    r = _measure(tree)
                    if refit:
                        r.update(_measure(tree, REFIT_PROBE, "throughput"))
                        r.update(_measure(tree, REFIT_PROBE, "scale64"))
                    results[k].append(r)
        finally:
            subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", old], check=False)
    out = {}
    for k, rows in results.items():
        out[k] = {"per_op_us": min(r["per_op_us"] for r in rows),
                  "pipeline_ratio": {n: min(r["pipeline_ratio"][n] for r in rows) for n in rows[0]["pipeline_ratio"]}}
        if refit:
            out[k]["refit_per_cpu_s"] = max(r["refit_per_cpu_s"] for r in rows)
            out[k]["refit_64_wall_s"] = min(r["refit_64_wall_s"] for r in rows)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m simdist.benchmarks.compare", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("rev", help="the earlier commit (anything git rev-parse takes)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--refit", action="store_true", help="also the fakes' refit (schedules per CPU second, 64 ranks)")
    a = ap.parse_args(argv)
    load0 = os.getloadavg()[0]
    res = compare(a.rev, a.rounds, a.refit)
    print(f"hot path, {a.rev} vs this tree (best of {a.rounds} alternating rounds; load {load0:.2f} -> "
          f"{os.getloadavg()[0]:.2f})")
    print(f"{'':22s}{'before':>12s}{'after':>12s}")
    print(f"{'small op, us':22s}{res['before']['per_op_us']:12.2f}{res['after']['per_op_us']:12.2f}")
    for n in res["before"]["pipeline_ratio"]:
        print(f"{'pipeline ' + n + '^2, sim/eager':22s}{res['before']['pipeline_ratio'][n]:11.2f}x"
              f"{res['after']['pipeline_ratio'][n]:11.2f}x")
    if a.refit:
        print(f"{'refit, per CPU s':22s}{res['before']['refit_per_cpu_s']:12.2f}{res['after']['refit_per_cpu_s']:12.2f}")
        print(f"{'refit 64 ranks, s':22s}{res['before']['refit_64_wall_s']:12.2f}{res['after']['refit_64_wall_s']:12.2f}")


if __name__ == "__main__":
    main()
