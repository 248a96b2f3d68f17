"""How fast ranks start and meet, by transport: a 2-rank run of a small torchrun script as rank threads and as
rank processes (forked from simdist's fork server), warm (the server already started, as every run after a
session's first) and cold (a fresh interpreter: `simdist run SCRIPT -n 2` from the shell, server start and
imports included), side by side in one run. `python -m simdist.benchmarks.transports` prints them."""
from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import time

import simdist

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "examples", "torchrun_allreduce.py")  # streams, an all_reduce, prints per rank


def warm_run_s(transport, reps=7, world_size=2):
    """Best wall time of `simdist.run_script(SCRIPT, world_size=2, transport=...)`, after one warm-up run."""
    def once():
        with contextlib.redirect_stdout(io.StringIO()):
            simdist.run_script(SCRIPT, world_size=world_size, argv=["--fix"], transport=transport)
    once()
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        once()
        best = min(best, time.perf_counter() - t)
    return best


def cold_cli_s(transport, reps=3):
    """Best wall time of the shell command `simdist run SCRIPT -n 2 --transport T -- --fix` (a new interpreter:
    imports, the fork server's start for processes, the run, the report)."""
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "simdist", "run", SCRIPT, "-n", "2", "--transport", transport,
                        "--", "--fix"], check=True, capture_output=True, cwd=ROOT)
        best = min(best, time.perf_counter() - t)
    return best


def measure(reps=7):
    return {
        "script_2_ranks_threads_warm_s": warm_run_s("threads", reps),
        "script_2_ranks_processes_warm_s": warm_run_s("processes", reps),
        "script_2_ranks_threads_cli_s": cold_cli_s("threads"),
        "script_2_ranks_processes_cli_s": cold_cli_s("processes"),
    }


if __name__ == "__main__":
    for k, v in measure().items():
        print(f"{k:36s} {v:.3f}")
