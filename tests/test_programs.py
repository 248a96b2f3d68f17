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
import glob
import io
import os
import re

import pytest

import simdist

TESTS = os.path.dirname(os.path.abspath(__file__))
PROGRAMS = sorted(glob.glob(os.path.join(TESTS, "programs", "p[0-9]*.py")) +
                  glob.glob(os.path.join(TESTS, "programs2", "q[0-9]*.py")) +
                  glob.glob(os.path.join(TESTS, "programs3", "r[0-9]*.py")))


def _meta(path):
    doc = re.search(r'"""(.*?)"""', open(path).read(), re.S).group(1)

    def field(name, default=None):
        m = re.search(rf"^{name}:\s*(.+)$", doc, re.M)
        return m.group(1).strip() if m else default

    def kinds(name):
        return {k.strip() for k in field(name, "").split(",") if k.strip()}
    dc = field("DEVICE_COUNT")
    return {"expected": field("EXPECTED", "clean"), "kinds": kinds("KINDS"), "also": kinds("KINDS_ALSO"),
            "errors": {e.strip() for e in field("ERROR", "").split("|") if e.strip()},
            "world_size": int(field("WORLD_SIZE", "2")),
            "opts": {k: v for k, v in (("nccl", field("NCCL")), ("device_count", dc and int(dc))) if v}}


def test_corpora_are_there():
    assert len([p for p in PROGRAMS if "/programs/" in p]) >= 60
    assert len([p for p in PROGRAMS if "/programs2/" in p]) >= 50
    assert len([p for p in PROGRAMS if "/programs3/" in p]) >= 40


@pytest.mark.parametrize("path", PROGRAMS, ids=[os.path.basename(p)[:-3] for p in PROGRAMS])
def test_program_verdict(path):
    m = _meta(path)
    for seed in range(3):
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                res = simdist.run_script(path, world_size=m["world_size"], seed=seed, **m["opts"])
        except Exception as e:  # noqa: BLE001
            names = {c.__name__ for c in type(e).__mro__}
            if m["expected"] in ("error", "clean-or-error") and names & m["errors"]:
                continue
            raise
        assert m["expected"] != "error", f"seed {seed}: expected {m['errors']}, the run succeeded"
        found = {h.kind for h in res.hazards}
        if m["expected"] in ("clean", "clean-or-error"):
            assert not found, f"seed {seed}: false positive\n{res.report()}"
        else:
            assert found, f"seed {seed}: race missed"
            assert m["kinds"] <= found <= m["kinds"] | m["also"], f"seed {seed}: kinds {found}, expected {m['kinds']}"
