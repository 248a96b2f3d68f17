"""The `simdist` command: help, run with a report, and a replay that reproduces the digest."""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _simdist(*args):
    return subprocess.run([sys.executable, "-m", "simdist", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)


def test_help_explains_itself():
    out = _simdist("--help")
    assert out.returncode == 0
    for word in ("hunt", "run", "bench", "scenarios"):
        assert word in out.stdout


def test_run_reports_and_replays():
    out = _simdist("run", "examples/incident.py:refit_one_weight", "--world-size", "2", "--seed", "1")
    assert out.returncode == 1, out.stderr  # hazards found
    assert "read-after-write" in out.stdout and "OBSERVED" in out.stdout
    digest = re.search(r"digest=(\w+)", out.stdout).group(1)
    replay = re.search(r"^replay: simdist (run .*)$", out.stdout, re.M).group(1).split()
    again = _simdist(*replay[:1], "examples/incident.py:refit_one_weight", *replay[2:])
    assert re.search(r"digest=(\w+)", again.stdout).group(1) == digest


def test_run_with_the_fix_is_clean():
    out = _simdist("run", "examples/incident.py:refit_one_weight", "--world-size", "2", "--kwargs", '{"fix": true}')
    assert out.returncode == 0 and "no hazards" in out.stdout
