"""Backward passes choose streams as torch's CUDA engine does, checked against an H200 (torch 2.11):
ci/gpu_backward_streams.py ran each case there (docs/gpu/backward-streams-2026-12-02.json) and runs it here under
simdist. Rules: each backward op runs on its forward op's stream, AccumulateGrad on the stream its node was made
on, the engine joins them with events and the caller's stream waits for the leaf streams
(https://pytorch.org/docs/stable/notes/cuda.html#stream-semantics-of-backward-passes; torch/csrc/autograd/
engine.cpp, input_buffer.cpp).
"""
import json
import os
import sys
import warnings

import pytest

from simdist.faces import guard

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "ci"))
import gpu_backward_streams as cases  # noqa: E402

GPU = json.load(open(os.path.join(os.path.dirname(__file__), "..", "docs", "gpu",
                                  "backward-streams-2026-12-02.json")))

pytestmark = pytest.mark.skipif(not guard.load(warn=False), reason=guard.reason() or "no fake CUDA guard")


@pytest.mark.parametrize("case", cases.CASES, ids=[c.__name__ for c in cases.CASES])
def test_backward_streams_and_races_match_the_gpu(case):
    """The hooks inside the backward pass see the stream the GPU's saw, and simdist reports a hazard exactly in
    the cases whose values the GPU got wrong when one stream was delayed (and values right where it has none)."""
    gpu = GPU["cases"][case.__name__]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's AccumulateGrad stream-mismatch warning (accumulator_made_on_default)
        got = cases.sim(case)
    assert got["streams"] == gpu["streams"]
    assert bool(got["hazards"]) == (not gpu["values_right_delayed"]), got
    if not got["hazards"]:
        assert got["values_right"]


def test_the_gpu_record_shows_both_verdicts():
    """The comparison can fail both ways: the GPU record has damaged and undamaged cases."""
    delayed = [c["values_right_delayed"] for c in GPU["cases"].values()]
    assert True in delayed and False in delayed
    assert set(GPU["cases"]) == {c.__name__ for c in cases.CASES}
