"""Opt-in (slow, real_libs): torch's own distributed libraries under simdist equal torchrun on CPU with gloo, digit
for digit (notes e5, e7). Each case runs one script of tests/real_libs/ twice, ~10-15 s on this machine:

    python -m pytest -m slow tests/test_e_series_real_scripts.py
"""
import os
import shutil
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.real_libs]

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def _lines(script, mode, n, tmp_path, how):
    out = tmp_path / f"{how}-{mode}"
    out.mkdir()
    env = dict(os.environ, PPOUT=str(out), OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    path = os.path.join(HERE, "real_libs", script)
    if how == "gloo":
        torchrun = shutil.which("torchrun") or os.path.join(os.path.dirname(sys.executable), "torchrun")
        cmd = [torchrun, "--standalone", f"--nproc-per-node={n}", path, mode]
    else:
        cmd = [sys.executable, "-m", "simdist", "run", path, "-n", str(n), "--", mode]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    if how == "simdist":
        assert "no hazards" in proc.stdout
    lines = sorted(line for f in sorted(out.iterdir()) for line in f.read_text().splitlines())
    assert lines
    return lines


@pytest.mark.parametrize("mode", ["interleaved", "zbv"])
def test_pipelining_schedules_equal_gloo(tmp_path, mode):
    assert _lines("torch_pipelining_schedules.py", mode, 2, tmp_path, "simdist") == \
        _lines("torch_pipelining_schedules.py", mode, 2, tmp_path, "gloo")


@pytest.mark.parametrize("mode", ["powersgd1", "bf16", "localsgd"])
def test_ddp_comm_hooks_equal_gloo(tmp_path, mode):
    assert _lines("torch_ddp_algorithms.py", mode, 2, tmp_path, "simdist") == \
        _lines("torch_ddp_algorithms.py", mode, 2, tmp_path, "gloo")


def test_zero_overlap_with_ddp_equals_zero_skipping_two_steps(tmp_path):
    """gloo refuses overlap_with_ddp ("may meet hangs"); the overlap does not update in its first two steps."""
    assert _lines("torch_ddp_algorithms.py", "zero_overlap", 2, tmp_path, "simdist") == \
        _lines("torch_ddp_algorithms.py", "zero_ref", 2, tmp_path, "gloo")


def test_fsdp1_with_prefetch_options_equals_ddp_adam(tmp_path):
    """FSDP1 needs an accelerator (no gloo run); its losses and full state dict equal DDP + Adam's on gloo."""
    sim = [x for x in _lines("torch_ddp_algorithms.py", "fsdp1", 2, tmp_path, "simdist")
           if x.startswith(("LOSS", "FULL"))]
    ref = [x for x in _lines("torch_ddp_algorithms.py", "ddp_adam", 2, tmp_path, "gloo")
           if x.startswith(("LOSS", "FULL"))]
    assert sim == ref
