"""The program corpus (tests/corpus/<topic>/): plain torchrun-style programs, each with its expected verdict in
its docstring, one folder per topic: streams, allocator, host_copies, views, random, devices, training (autograd,
optimizers, DDP-like hooks), collectives, p2p, errors (programs that must fail with a named error).

The p*, q* and r* programs were written as three adversarial probe sets by people who had not read simdist's
tests; about half of them contain one race. A new program goes into the folder of its topic. Each docstring states EXPECTED (clean | hazard |
error | clean-or-error), KINDS (every one must be reported), KINDS_ALSO (may also be reported), ERROR, and the
PyTorch rule behind the verdict. Every program runs unmodified through simdist.run_script; clean programs check
their own numbers. `python tests/corpus/run_all.py [--dir tests/corpus/p2p] --seeds 10` prints a table.
"""
import contextlib
import io
import json
import os

import pytest
import torch

import simdist
from simdist.properties.programs import corpus_paths, parse, run_options

CORPUS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
PROGRAMS = corpus_paths(CORPUS)
# every program's digest per seed, as recorded by tests/corpus/record_digests.py with one torch version
_RECORDED = json.load(open(os.path.join(CORPUS, "digests.json")))
DIGESTS = _RECORDED["digests"] if _RECORDED["torch"] == torch.__version__ else {}


def test_corpus_is_there():
    names = [os.path.basename(p) for p in PROGRAMS]
    assert len([n for n in names if n.startswith("p")]) >= 60
    assert len([n for n in names if n.startswith("q")]) >= 50
    assert len([n for n in names if n.startswith("r")]) >= 40


@pytest.mark.parametrize("path", PROGRAMS, ids=[os.path.basename(p)[:-3] for p in PROGRAMS])
def test_program_verdict(path):
    m = parse(path)
    kinds, also, errors = set(m["kinds"]), set(m["kinds_also"]), set(m["errors"])
    for seed in range(3):
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                res = simdist.run_script(path, world_size=m["world_size"], seed=seed, **run_options(m))
        except Exception as e:  # noqa: BLE001
            names = {c.__name__ for c in type(e).__mro__}
            if m["expected"] in ("error", "clean-or-error") and names & errors:
                continue
            raise
        assert m["expected"] != "error", f"seed {seed}: expected {errors}, the run succeeded"
        recorded = DIGESTS.get(f"{os.path.relpath(path, CORPUS)}:{seed}")
        assert recorded in (None, res.digest), (
            f"seed {seed}: digest {res.digest}, recorded {recorded}: the schedule, a report site or a value changed "
            "(a bug, or record again on purpose: python tests/corpus/record_digests.py)")
        found = {h.kind for h in res.hazards}
        if m["expected"] in ("clean", "clean-or-error"):
            assert not found, f"seed {seed}: false positive\n{res.report()}"
        else:
            assert found, f"seed {seed}: race missed"
            assert kinds <= found <= kinds | also, f"seed {seed}: kinds {found}, expected {kinds}"
