"""The hunt's real stack (properties/real_stack.py): real Megatron-Core 0.16.1 + Megatron-Bridge 0.3.1 under
simdist with ranks as processes, and the TransformerEngine stand-in (fakes/te_standin) that lets Bridge import.

Skipped with the reason when megatron-core, megatron-bridge or transformers is absent. Each simulated run is a
few seconds to a minute on this 2-core machine (the fork server imports the real stack once per test process).
"""
import json
import os
import subprocess
import sys

import pytest

from simdist.properties import real_stack

WHY = real_stack.have_real_libs()
pytestmark = [pytest.mark.real_libs, pytest.mark.skipif(bool(WHY), reason=WHY or "-")]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module", autouse=True)
def _preload():
    real_stack.prepare_hunt() if not WHY else None  # the fork server imports the real stack once
    yield


def _run(world, **kw):
    import simdist
    from simdist.properties.hunt import NCCL, refit_program
    base = dict(tp=1, pp=1, recipe="bf16", fp8_param=False, steps=2, layers=2, stack="real")
    base.update(kw)
    return simdist.run(refit_program, world_size=world, kwargs=base, nccl=NCCL, transport="processes")


def test_refit_equals_the_reference_without_hazard_tp2():
    res = _run(2, tp=2)
    assert not res.hazards, res.report()
    assert res.returns == [[{"mismatched": 0, "metric": 1.0}] * 2] * 2


def test_refit_equals_the_reference_without_hazard_pp2():
    res = _run(2, pp=2)  # the PP broadcast of Megatron-Bridge, P2P of Megatron's schedule
    assert not res.hazards, res.report()
    assert res.returns == [[{"mismatched": 0, "metric": 1.0}] * 2] * 2


def test_faithful_dp2_exports_stale_slices_after_the_step():
    """The real code's own ordering at DP=2: the refit after an optimizer step exports the other DP rank's slices
    from before it (megatron-core dispatches the param all-gather only at the next forward pre-hook) -- no race,
    weights differ from step 2 on; the fix param_sync_before_refit makes it exact."""
    res = _run(2)
    assert not res.hazards, res.report()
    for rank in res.returns:
        assert rank[0]["mismatched"] == 0 and rank[1]["mismatched"] > 0
        assert rank[1]["metric"] < 1.05
    fixed = _run(2, fixes=("param_sync_before_refit",))
    assert not fixed.hazards and fixed.returns == [[{"mismatched": 0, "metric": 1.0}] * 2] * 2


def test_planted_fault_is_reported():
    """async_gather_no_wait planted in Megatron-Bridge's own gather_from_tp_ranks: a race reported (and here it
    damages the values: NaN from fresh memory)."""
    res = _run(2, tp=2, faults=("async_gather_no_wait",))
    assert res.hazards
    assert any("param_mapping.py" in str(h) for h in res.hazards)
    assert all(r["mismatched"] for rank in res.returns for r in rank)


def test_fp8_params_and_refit_during_param_gather_are_named_unsupported():
    with pytest.raises(real_stack.RealStackUnsupported, match="fp8_param=True"):
        real_stack.check("blockwise-fp32", True, (), ())
    with pytest.raises(real_stack.RealStackUnsupported, match="virtual pipeline"):
        real_stack.check("bf16", False, ("refit_during_param_gather",), ())


_STANDIN_PROBE = r"""
import json, sys
from simdist.fakes import te_standin
if te_standin.real_te_available():
    print(json.dumps({"real_te": True})); sys.exit()
from simdist.properties import real_stack
real_stack._import_bridge()
import transformer_engine.pytorch as te
out = {"real_te": False, "saw": te_standin.megatron_core_saw_te()}
try:
    te.LayerNormLinear
except AttributeError as e:
    out["missing"] = str(e)
try:
    te.Linear(4, 4)
except AttributeError as e:
    out["construct"] = str(e)
flags = {}
for name, mod in sorted(sys.modules.items()):
    if name.startswith("megatron.core"):
        for k in ("HAVE_TE", "HAVE_TE_FP8_TENSOR_CLASS", "HAVE_TE_MXFP8TENSOR"):
            if hasattr(mod, k):
                flags[name + "." + k] = bool(getattr(mod, k))
out["flags"] = flags
print(json.dumps(out))
"""

_BASELINE = r"""
import importlib, json, sys
names = json.loads(sys.argv[1])
flags = {}
for key in names:
    mod, k = key.rsplit(".", 1)
    flags[key] = bool(getattr(importlib.import_module(mod), k))
print(json.dumps(flags))
"""


def test_standin_lets_bridge_import_and_keeps_megatron_core_off_te():
    """Bridge imports with the stand-in; every Megatron-Core TE flag is the value it has in a process where no
    TransformerEngine exists at all; a symbol the stand-in lacks raises an error naming it."""
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    out = json.loads(subprocess.run([sys.executable, "-c", _STANDIN_PROBE], capture_output=True, text=True,
                                    check=True, env=env, cwd=ROOT).stdout.strip().splitlines()[-1])
    if out["real_te"]:
        pytest.skip("a real TransformerEngine is installed: the stand-in is not used")
    assert out["saw"] == []
    assert "transformer_engine.pytorch.LayerNormLinear is not provided" in out["missing"]
    assert "transformer_engine.pytorch.Linear cannot be created" in out["construct"]
    base = json.loads(subprocess.run([sys.executable, "-c", _BASELINE, json.dumps(sorted(out["flags"]))],
                                     capture_output=True, text=True, check=True, env=env,
                                     cwd=ROOT).stdout.strip().splitlines()[-1])
    assert out["flags"] == base
    assert out["flags"]["megatron.core.fp8_utils.HAVE_TE"] is False


def test_hunt_stack_real_end_to_end(tmp_path):
    """`simdist hunt --stack real` on a reduced sweep: one evidence cell that runs (bf16) and one that the real
    stack names unsupported (FP8 params)."""
    ev = {"format": "simdist-hunt-evidence/1", "incident": "reduced sweep of the real stack", "source": "test",
          "symptom": "token_mult_prob_error",
          "run": {"tp": 2, "pp": 1, "dp": 1, "recipe": "bf16", "fp8_param": False, "refit": "colocated"},
          "run_status": {},
          "observations": [{"change": {}, "status": "observed", "outcome": "fine"},
                           {"change": {"recipe": "blockwise-fp32", "fp8_param": True}, "status": "observed",
                            "outcome": "nan", "onset_step": 2}]}
    path = tmp_path / "ev.json"
    path.write_text(json.dumps(ev))
    proc = subprocess.run([sys.executable, "-m", "simdist.properties.hunt", "--stack", "real", "--reported",
                           str(path), "--depths", "2", "--seeds", "1", "--candidates", "faithful",
                           "--fix-schedules", "3", "--processes", "1", "--no-progress", "--json",
                           "--trace", str(tmp_path / "t.json")],
                          capture_output=True, text=True, cwd=ROOT, timeout=900,
                          env=dict(os.environ, PYTHONWARNINGS="ignore"))
    out = json.loads(proc.stdout[proc.stdout.index("{"):])
    cells = {(c["config"]["recipe"], c["config"]["dp"]): c for c in out["cells"]}
    assert cells[("bf16", 1)]["text"] == ".."
    fp8 = cells[("blockwise-fp32", 1)]
    assert fp8["text"] == "XX" and "RealStackUnsupported" in fp8["replicates"][0]["error"]
    assert "megatron-core 0.16.1" in out["versions"] and "Megatron-Bridge 0.3.1" in out["versions"]
    # the fix check runs one schedule per configuration: the unsupported one is not run, not counted as failing
    fix = out["fix"]
    assert fix["schedules"] == 2 and fix["failures"] == [], fix
    assert len(fix["not_run"]) == 1 and "RealStackUnsupported" in fix["not_run"][0], fix
