"""The hot path of two versions side by side, in one run: the small-op end-to-end cost and the 20-op pipeline's
simulated / eager ratio of this tree and of an earlier commit (checked out in a temporary git worktree),
measured alternately in fresh processes so that load changes hit both alike.

    python -m simdist.benchmarks.compare REV [--rounds 3]

Each figure is the best over the rounds (as timeit reports: the least disturbed run).
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


def _measure(tree):
    out = subprocess.run([sys.executable, "-c", PROBE, tree], capture_output=True, text=True, check=True,
                         env=dict(os.environ, OMP_NUM_THREADS="1"))
    return json.loads(out.stdout.strip().splitlines()[-1])


def compare(rev, rounds=3):
    with tempfile.TemporaryDirectory() as tmp:
        old = os.path.join(tmp, "tree")
        subprocess.run(["git", "-C", ROOT, "worktree", "add", "--detach", "-q", old, rev], check=True)
        try:
            results = {"before": [], "after": []}
            for _ in range(rounds):
                results["before"].append(_measure(old))
                results["after"].append(_measure(ROOT))
        finally:
            subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", old], check=False)
    out = {}
    for k, rows in results.items():
        out[k] = {"per_op_us": min(r["per_op_us"] for r in rows),
                  "pipeline_ratio": {n: min(r["pipeline_ratio"][n] for r in rows) for n in rows[0]["pipeline_ratio"]}}
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m simdist.benchmarks.compare", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("rev", help="the earlier commit (anything git rev-parse takes)")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args(argv)
    load0 = os.getloadavg()[0]
    res = compare(a.rev, a.rounds)
    print(f"hot path, {a.rev} vs this tree (best of {a.rounds} alternating rounds; load {load0:.2f} -> "
          f"{os.getloadavg()[0]:.2f})")
    print(f"{'':22s}{'before':>12s}{'after':>12s}")
    print(f"{'small op, us':22s}{res['before']['per_op_us']:12.2f}{res['after']['per_op_us']:12.2f}")
    for n in res["before"]["pipeline_ratio"]:
        print(f"{'pipeline ' + n + '^2, sim/eager':22s}{res['before']['pipeline_ratio'][n]:11.2f}x"
              f"{res['after']['pipeline_ratio'][n]:11.2f}x")


if __name__ == "__main__":
    main()
