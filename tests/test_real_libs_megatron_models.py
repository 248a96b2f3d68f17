"""Real megatron-core (0.16.1, unmodified) models under `simdist run`, each checked against a plain-torch
computation of the same weights in the script itself (tests/real_libs/):

- megatron_gpt_rope_gqa.py: GPTModel with the local layer spec (RoPE, GQA, SwiGLU, RMSNorm, an explicit causal +
  padding mask) at TP=2 under Megatron's DDP with overlap_grad_reduce, two SGD-momentum steps: losses, main_grads
  and parameters match the reference.
- megatron_inference_tp2.py: the same model through Megatron's inference stack (GPTInferenceWrapper,
  TextGenerationController, StaticInferenceEngine, legacy and dynamic), greedy decoding of two prompts: the tokens
  are the reference's. This runs under torch.inference_mode(), where simdist computed `triu(...).bool()` from
  poison and raised at every view of a weight (tests/test_inference_mode.py).
No hazards in the unmodified library."""
import os
import subprocess
import sys

import pytest

pytest.importorskip("megatron.core")

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "real_libs")


def _simdist_run(script, n, *args, timeout=600):
    cmd = [sys.executable, "-m", "simdist", "run", script, "-n", str(n), *(["--", *args] if args else [])]
    return subprocess.run(cmd, cwd=HERE, capture_output=True, text=True, timeout=timeout)


def test_megatron_gpt_trains_as_the_reference_at_tp2():
    r = _simdist_run("megatron_gpt_rope_gqa.py", 2)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert r.stdout.count(" OK") == 2 and "no hazards" in r.stdout, r.stdout[-2000:]


@pytest.mark.parametrize("engine", ["legacy", "dynamic"])
def test_megatron_inference_generates_the_references_tokens_at_tp2(engine):
    r = _simdist_run("megatron_inference_tp2.py", 2, engine)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("RANK ")]
    assert len(lines) == 4, r.stdout[-2000:]
    for ln in lines:
        got, want = ln.split(" generated ")[1].split(" reference ")
        assert got == want, ln
    assert "no hazards" in r.stdout, r.stdout[-2000:]
