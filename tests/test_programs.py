"""A corpus of plain torchrun-style programs (tests/programs/), each with its expected verdict in its docstring.

Written as an adversarial probe set by someone who had not read simdist's tests: ordinary user code over
streams, events, the caching allocator, pinned memory, async copies, collectives, P2P and subgroups, half of
them with one race. Each docstring states EXPECTED (clean | hazard), KINDS and the PyTorch rule behind it.
Every program runs unmodified through simdist.run_script; clean programs assert their own results.
`python tests/programs/run_all.py` runs the corpus over 10 seeds in subprocesses and prints a table.
"""
import contextlib
import glob
import io
import os
import re

import pytest

import simdist

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "programs")
PROGRAMS = sorted(glob.glob(os.path.join(HERE, "p[0-9]*.py")))


def _meta(path):
    doc = re.search(r'"""(.*?)"""', open(path).read(), re.S).group(1)

    def field(name, default=None):
        m = re.search(rf"^{name}:\s*(.+)$", doc, re.M)
        return m.group(1).strip() if m else default
    return (field("EXPECTED", "clean"), sorted(k.strip() for k in field("KINDS", "").split(",") if k.strip()),
            int(field("WORLD_SIZE", "2")), field("NCCL"))


def test_corpus_is_there():
    assert len(PROGRAMS) >= 60


@pytest.mark.parametrize("path", PROGRAMS, ids=[os.path.basename(p)[:-3] for p in PROGRAMS])
def test_program_verdict(path):
    expected, kinds, world_size, nccl = _meta(path)
    opts = {"nccl": nccl} if nccl else {}
    for seed in range(3):
        with contextlib.redirect_stdout(io.StringIO()):
            res = simdist.run_script(path, world_size=world_size, seed=seed, **opts)
        found = sorted({h.kind for h in res.hazards})
        if expected == "clean":
            assert not found, f"seed {seed}: false positive\n{res.report()}"
        else:
            assert found, f"seed {seed}: race missed"
            if kinds:
                assert found == kinds, f"seed {seed}: kinds {found}, expected {kinds}"
