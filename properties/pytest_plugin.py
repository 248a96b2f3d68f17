"""pytest plugin (entry point `simdist`): fixtures, a marker and options for simulated worlds.

- `--simdist-seed N` / `--simdist-nccl 2.7|2.8`: defaults for every simulated run in the session.
- `@pytest.mark.simdist(world_size=2, nccl="2.7")`: per-test defaults.
- fixture `simdist_run`: `simdist_run(fn, **overrides)` runs fn in a simulated world with those defaults
  and remembers the result; when the test fails, the report ends with a one-line replay command.
- fixture `simdist_world`: the defaults as a dict (world_size, seed, nccl).
- marker `fuzz(cost=N)` (set by `simdist.properties.fuzz`): a property test of the fuzz campaign (`ci/fuzz`
  selects `-m fuzz`); with SIMDIST_FUZZ_LOG set, the collected properties and their costs are written to that log
  first, so the campaign's summary can print each one's budget under every profile.
"""
from __future__ import annotations

import pytest


def pytest_addoption(parser):
    g = parser.getgroup("simdist")
    g.addoption("--simdist-seed", type=int, default=None, help="seed for simulated runs (default: 0)")
    g.addoption("--simdist-nccl", default=None, help="NCCL stream-semantics profile: 2.7 or 2.8")
    g.addoption("--simdist-profile", default=None, help="Hypothesis settings profile: ci, dev or nightly")


def pytest_configure(config):
    config.addinivalue_line("markers", "simdist(world_size=1, nccl=None, seed=None): simulated-world defaults")
    config.addinivalue_line("markers", "fuzz(cost=1): a Hypothesis property of the fuzz campaign; its example budget "
                                       "is the profile's for that cost (simdist.properties.fuzz)")
    prof = config.getoption("--simdist-profile", default=None)
    try:
        from simdist.properties.settings import load_profile
        load_profile(prof)
    except ImportError:
        pass


def pytest_collection_finish(session):
    import os
    path = os.environ.get("SIMDIST_FUZZ_LOG")
    if not path:
        return
    import json
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "a") as f:
        for item in session.items:  # after -m / -k deselection
            m = item.get_closest_marker("fuzz")
            if m is not None:
                f.write(json.dumps({"manifest": True, "test": item.nodeid, "cost": m.kwargs.get("cost", 1)}) + "\n")


@pytest.fixture
def simdist_world(request):
    m = request.node.get_closest_marker("simdist")
    kw = dict(m.kwargs) if m else {}
    seed = request.config.getoption("--simdist-seed")
    nccl = request.config.getoption("--simdist-nccl")
    out = {"world_size": kw.get("world_size", 1), "seed": kw.get("seed", seed if seed is not None else 0)}
    if kw.get("nccl") or nccl:
        out["nccl"] = kw.get("nccl") or nccl
    return out


@pytest.fixture
def simdist_run(request, simdist_world):
    import simdist
    runs = []
    request.node._simdist_runs = runs

    def run(fn, **overrides):
        kw = dict(simdist_world)
        kw.update(overrides)
        res = simdist.run(fn, **kw)
        runs.append((fn, kw, res))
        return res
    return run


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    runs = getattr(item, "_simdist_runs", None)
    if rep.when == "call" and rep.failed and runs:
        fn, kw, res = runs[-1]
        args = " ".join(f"--simdist-{k.replace('_', '-')} {v}" for k, v in kw.items() if k in ("seed", "nccl"))
        rep.sections.append(("simdist replay", f"pytest '{item.nodeid}' {args}\n{res.replay}"))
