"""Real library scripts from their repositories, run unmodified under `simdist run` as a user would (series z, notes
z1, z2). The scripts are not in this repository and CI cannot fetch them, so these tests are opt-in and slow:

    SIMDIST_MEGATRON_LM=/path/to/Megatron-LM    # a checkout at core_v0.16.1 (the installed megatron-core's)
    SIMDIST_PYTORCH_EXAMPLES=/path/to/examples  # a checkout of pytorch/examples
    SIMDIST_REAL_SCRIPTS_PATH=DIR               # extra packages for Megatron-LM's megatron.training imports
                                                # (six, triton, pydantic, pydantic-core, annotated-types,
                                                # typing-inspection, pybind11: `pip install --target DIR ...`)
    python -m pytest -m slow tests/test_real_scripts.py

What CI checks of the same patterns are corpus programs modelled on them (tests/corpus/training/z01, z02).
Measured on 2026-12-02 (notes z2): run_simple_mcore_train_loop.py at TP=2 printed, in simdist, the same five losses
to ten digits as the same script under torchrun on CPU (gloo, with tests/real_libs/_serial_cuda.py's stand-in for
CUDA, dropout set to 0 in both and each rank's CPU generator seeded as simdist seeds it).
"""
import os
import re
import shutil
import subprocess
import sys

import pytest

MEGATRON_LM = os.environ.get("SIMDIST_MEGATRON_LM")
EXAMPLES = os.environ.get("SIMDIST_PYTORCH_EXAMPLES")
EXTRA = os.environ.get("SIMDIST_REAL_SCRIPTS_PATH", "")

pytestmark = [pytest.mark.slow, pytest.mark.real_libs]


def _simdist(script, n, args, cwd, pythonpath=""):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", PYTHONWARNINGS="ignore")
    if pythonpath:
        env["PYTHONPATH"] = pythonpath + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    cmd = [sys.executable, "-m", "simdist", "run", script, "-n", str(n), "--", *args]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.skipif(not MEGATRON_LM, reason="SIMDIST_MEGATRON_LM (a Megatron-LM checkout at core_v0.16.1) not set")
def test_megatron_simple_train_loop_runs_clean_and_tp_ranks_agree_on_the_loss(tmp_path):
    """examples/run_simple_mcore_train_loop.py (TP=2, GPTModel, DDP, 5 iterations, dist_checkpointing save/load):
    clean; both TP ranks print the same losses (the vocab-parallel loss is all-reduced) with the device and
    grad_fn a GPU prints (notes z1). Its ranks' unseeded host generators differ, as under torchrun (notes z2)."""
    if shutil.which("make") is None or shutil.which("g++") is None:
        pytest.skip("compile_helpers() needs make and g++")
    script = os.path.join(MEGATRON_LM, "examples", "run_simple_mcore_train_loop.py")
    proc = _simdist(script, 2, [], str(tmp_path), os.pathsep.join(p for p in (MEGATRON_LM, EXTRA) if p))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "no hazards" in proc.stdout
    losses = re.findall(r"Iteration (\d): Losses reduced: \[\{'lm loss': tensor\(([\d.]+), device='cuda:(\d)', "
                        r"grad_fn=<DivBackward0>\)\}\]", proc.stdout)
    assert len(losses) == 10, proc.stdout[-3000:]
    by_iter = {}
    for it, value, _dev in losses:
        by_iter.setdefault(it, set()).add(value)
    assert all(len(v) == 1 for v in by_iter.values()), by_iter
    assert proc.stdout.count("Successfully loaded the model") == 2


@pytest.mark.skipif(not EXAMPLES, reason="SIMDIST_PYTORCH_EXAMPLES (a pytorch/examples checkout) not set")
def test_ddp_tutorial_multigpu_torchrun_trains_snapshots_and_resumes_clean(tmp_path):
    """distributed/ddp-tutorial-series/multigpu_torchrun.py: torch DDP, DistributedSampler, pinned DataLoader,
    snapshot by rank 0 every 2 epochs; a second run resumes from the snapshot (torch.load map_location cuda:N).
    Clean both times. (Its loss, F.cross_entropy of one logit against a float target, is 0 and its gradients are
    zero: the weights never move, on a GPU as here.)"""
    folder = os.path.join(EXAMPLES, "distributed", "ddp-tutorial-series")
    for f in ("multigpu_torchrun.py", "datautils.py"):
        shutil.copy(os.path.join(folder, f), tmp_path / f)
    first = _simdist("multigpu_torchrun.py", 2, ["5", "2"], str(tmp_path))
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert "no hazards" in first.stdout and "Epoch 4 | Training snapshot saved" in first.stdout
    again = _simdist("multigpu_torchrun.py", 2, ["7", "2"], str(tmp_path))
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "Resuming training from snapshot at Epoch 4" in again.stdout and "no hazards" in again.stdout
