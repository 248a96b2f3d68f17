"""Three corpora of plain torchrun-style programs, each with its expected verdict in its docstring.

tests/programs/ (p*.py): streams, events, the caching allocator, pinned memory, async copies, collectives, P2P
and subgroups. tests/programs2/ (q*.py): training with autograd and optimizers, DDP-like gradient hooks,
autocast, several devices per rank, views and aliasing across streams, allocator statistics, and bad programs
that must fail with a named error. tests/programs3/ (r*.py): NCCL semantics in depth (async lifetimes, barrier,
collectives into slices, several groups and streams, P2P, uneven and rooted collectives, reduce ops, gloo).
All three were written as adversarial probe sets by someone who had not read
simdist's tests; about half of the programs contain one race. Each docstring states EXPECTED (clean | hazard |
error | clean-or-error), KINDS (every one must be reported), KINDS_ALSO (may also be reported), ERROR, and the
PyTorch rule behind the verdict. Every program runs unmodified through simdist.run_script; clean programs check
their own numbers. `python tests/programs/run_all.py [--dir tests/programs2] --seeds 10` prints a table.
"""
import contextlib
import io
import os

import pytest

import simdist
from properties.programs import corpus_paths, parse, run_options

PROGRAMS = corpus_paths()


def test_corpora_are_there():
    assert len([p for p in PROGRAMS if "/programs/" in p]) >= 60
    assert len([p for p in PROGRAMS if "/programs2/" in p]) >= 50
    assert len([p for p in PROGRAMS if "/programs3/" in p]) >= 40


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
        found = {h.kind for h in res.hazards}
        if m["expected"] in ("clean", "clean-or-error"):
            assert not found, f"seed {seed}: false positive\n{res.report()}"
        else:
            assert found, f"seed {seed}: race missed"
            assert kinds <= found <= kinds | also, f"seed {seed}: kinds {found}, expected {kinds}"
