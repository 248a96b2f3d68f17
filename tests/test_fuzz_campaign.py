"""The fuzz campaign itself: budgets from the profile, failure reports, the time-to-find harness, the summary,
and two `ci/fuzz` workers sharing a failure through a real Redis server."""
import ast
import glob
import io
import json
import os
import shutil
import socket
import subprocess
import sys
import time

import pytest

import simdist.properties as P
from simdist.properties import campaign, settings as S, timetofind

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _calls_with_max_examples(path):
    tree = ast.parse(open(path).read(), path)
    return [(path, n.lineno) for n in ast.walk(tree) if isinstance(n, ast.Call)
            and any(k.arg == "max_examples" for k in n.keywords)]


def test_no_test_pins_its_own_example_budget():
    """Every example budget in the test suite comes from the profile (`P.fuzz(cost)` / `P.budget(cost)`)."""
    files = [f for f in glob.glob(os.path.join(ROOT, "tests", "**", "*.py"), recursive=True)
             if os.sep + "corpus" + os.sep not in f]
    assert len(files) > 10
    pinned = [hit for f in files for hit in _calls_with_max_examples(f)]
    assert not pinned, f"tests that pin max_examples (use simdist.properties.fuzz(cost=...)): {pinned}"


def _fuzz_tests():
    import importlib
    out = []
    for mod in ("test_fuzz", "test_properties"):
        m = importlib.import_module(mod)
        for name in dir(m):
            fn = getattr(m, name)
            marks = [mk for mk in getattr(fn, "pytestmark", []) if mk.name == "fuzz"]
            if name.startswith("test_") and marks:
                out.append((f"{mod}::{name}", fn, marks[0].kwargs["cost"]))
    return out


def test_every_property_gets_the_profile_budget_and_nightly_is_50x_ci():
    tests = _fuzz_tests()
    assert len(tests) >= 8
    prof = S.current_profile_name()
    for name, fn, cost in tests:
        got = fn._hypothesis_internal_use_settings
        assert got.max_examples == S.budget_for(prof, cost), name
        assert S.budget_for("nightly", cost) >= 50 * S.budget_for("ci", cost), name
    for cost in range(1, S.MAX_COST + 1):
        assert S.budget_for("nightly", cost) >= 50 * S.budget_for("ci", cost)
    with pytest.raises(ValueError):
        S.budget_for("ci", S.MAX_COST + 1)


def test_profiles_and_databases(tmp_path, monkeypatch):
    from hypothesis import settings
    from hypothesis.database import DirectoryBasedExampleDatabase
    ci = settings.get_profile("ci")
    assert ci.derandomize and ci.database is None and ci.deadline is None and ci.print_blob
    monkeypatch.setenv(S.DB_ENV, str(tmp_path / "db"))
    assert isinstance(S.database_from_url(), DirectoryBasedExampleDatabase)
    assert isinstance(S.database_from_url(f"dir:{tmp_path}"), DirectoryBasedExampleDatabase)
    assert S.database_from_url("none") is None
    redis = pytest.importorskip("redis")
    db = S.database_from_url("redis://127.0.0.1:1/0")  # a client only: no connection until used
    assert type(db).__name__ == "RedisExampleDatabase" and isinstance(db.redis, redis.Redis)
    prev = S.current_profile_name()
    try:
        S.load_profile("nightly")
        nightly = settings.get_profile("nightly")
        assert isinstance(nightly.database, DirectoryBasedExampleDatabase) and not nightly.derandomize
        assert nightly.max_examples == 100 * ci.max_examples
    finally:
        S.load_profile(prev)


FAILING = '''
from hypothesis import given
import simdist.properties as P

@P.fuzz(cost=2)
@given(case=P.kernel_cases(max_world=2, drop="wait_stream", syncs=("wait_stream",)), schedule=P.choice_schedules(1))
def test_planted(case, schedule):
    P.kernel_matches_reference(case, schedule)
'''


def _env(**kw):
    env = dict(os.environ)
    env.pop("PYTEST_XDIST_WORKER", None)
    env.update({k: str(v) for k, v in kw.items()})
    return env


def test_a_failing_property_prints_its_replay_command_blob_and_trace(tmp_path):
    (tmp_path / "test_planted.py").write_text(FAILING)
    traces = tmp_path / "traces"
    out = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider", "-q",
                          "test_planted.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                         env=_env(SIMDIST_HYPOTHESIS_PROFILE="dev", SIMDIST_TRACE_DIR=traces))
    text = out.stdout + out.stderr
    assert out.returncode == 1, text[-3000:]
    assert "@reproduce_failure(" in text, text[-3000:]
    replay = [line.split("simdist replay: ", 1)[1] for line in text.splitlines() if "simdist replay: " in line]
    assert replay and replay[-1].startswith("simdist run simdist.properties.campaign:incident_kernel "), text[-3000:]
    trace = [line.split("Perfetto trace of this failure: ", 1)[1].split()[0] for line in text.splitlines()
             if "Perfetto trace of this failure: " in line]
    assert trace and os.path.exists(trace[-1]), text[-3000:]
    assert json.load(open(trace[-1]))["traceEvents"]
    # the printed command replays the shrunk failure: the race is there again (exit status 1: hazards)
    rep = subprocess.run(replay[-1], shell=True, cwd=tmp_path, capture_output=True, text=True, timeout=300,
                         env=_env())
    assert rep.returncode == 1 and "read-after-write" in rep.stdout, rep.stdout[-2000:] + rep.stderr[-2000:]


def test_time_to_find_finds_and_shrinks_a_dropped_sync():
    cases = P.kernel_cases(max_world=4, drop="wait_stream", syncs=("wait_stream",))
    check = lambda c, s: P.kernel_matches_reference(c, s, hazards=False, record_as=None)  # noqa: E731
    r = timetofind.time_to_find(check, cases, P.run_schedules(), seed=0, find_s=60, shrink_s=30,
                              delay_schedules=P.choice_schedules())
    assert r["found"] and r["examples"] >= 1 and r["seconds"] < 60
    assert campaign.world_of(r["case"]) <= 2 and r["case"]["drop"] and r["case"]["sync"] == "wait_stream"
    assert r["schedule"].nonzero_delays is not None and r["schedule"].nonzero_delays <= 2
    with pytest.raises(Exception):  # the shrunk example still fails
        check(r["case"], r["schedule"])
    # the faithful kernel: nothing to find; the harness stops at its time budget
    clean = timetofind.time_to_find(check, P.kernel_cases(max_world=2), P.run_schedules(), seed=0, find_s=1.5)
    assert not clean["found"] and clean["examples"] >= 1


def test_summary_counts_configurations_schedules_budgets_and_failures(tmp_path):
    case = {"world": 2, "sync": "wait_stream", "drop": True, "recipe": "mxfp8", "block": [1, 32], "rows": 32,
            "cols": 32, "weights": 1, "nccl": "2.8"}
    log = tmp_path / "worker-h-0.jsonl"
    with open(log, "w") as f:
        f.write(json.dumps({"manifest": True, "test": "t.py::test_a", "cost": 2}) + "\n")
    os.environ[campaign.LOG_ENV] = str(log)
    try:
        campaign.record("p", case, P.Schedule(), True)
        campaign.record("p", dict(case, world=3), P.Schedule("jitter", seed=3), True)
        campaign.record("p", case, P.Schedule("pct", seed=1), False, failure="p fails\n  damaged",
                        replay="simdist run x", final=True)
    finally:
        del os.environ[campaign.LOG_ENV]
    buf = io.StringIO()
    assert campaign.summarize(str(tmp_path), "nightly", out=buf) == 1
    text = buf.getvalue()
    assert "examples run: 3" in text and "configurations explored: 2" in text and "schedules explored: 3" in text
    assert "100x" in text and "replay: simdist run x" in text and "shrunk to" in text


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ci_fuzz(tmp_path, name, db):
    out = tmp_path / name
    p = subprocess.run(["bash", os.path.join(ROOT, "ci", "fuzz"), "--workers", "1", "--db", db, "--plant",
                        "async_gather_no_wait", "--max-world", "2", "--out", str(out), "--",
                        os.path.join(ROOT, "tests", "test_fuzz.py"), "-k", "test_refit_equals_reference"],
                       cwd=ROOT, capture_output=True, text=True, timeout=600, env=_env())
    rows = [r for f in glob.glob(str(out / "worker-*.jsonl")) for r in campaign.read_log(f) if not r.get("manifest")]
    return p, rows


@pytest.mark.skipif(shutil.which("redis-server") is None,
                    reason="redis-server is not installed (Debian package `redis-server`; .ci/run installs it)")
def test_two_ci_fuzz_workers_share_a_failure_through_a_real_redis(tmp_path):
    """Worker A finds a planted fault (async_gather_no_wait: needs TP >= 2, so the simplest example, TP=1, passes)
    and shrinks it; worker B, another `ci/fuzz` on the same Redis, runs that shrunk failure as its first example."""
    import redis
    port = _free_port()
    server = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                               "--appendonly", "no", "--dir", str(tmp_path)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        client = redis.Redis(port=port)
        for _ in range(100):
            try:
                if client.ping():
                    break
            except redis.ConnectionError:
                time.sleep(0.05)
        url = f"redis://127.0.0.1:{port}/0"
        a, rows_a = _ci_fuzz(tmp_path, "a", url)
        assert a.returncode == 1, a.stdout[-3000:] + a.stderr[-2000:]
        assert "failures: 1 failing property" in a.stdout and "replay: simdist run" in a.stdout, a.stdout[-3000:]
        shrunk = [r for r in rows_a if not r["ok"] and r["final"]][-1]
        assert rows_a[0]["ok"] and rows_a[0]["case"] != shrunk["case"]  # A started elsewhere: the DB was empty
        assert any(k.startswith(S.REDIS_PREFIX) for k in client.keys("*"))
        b, rows_b = _ci_fuzz(tmp_path, "b", url)
        assert b.returncode == 1, b.stdout[-3000:]
        first = rows_b[0]
        assert (first["case"], first["schedule"]) == (shrunk["case"], shrunk["schedule"]) and not first["ok"]
    finally:
        server.terminate()
        server.wait(timeout=10)
