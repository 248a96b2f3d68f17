"""Witnesses (simdist/witness.py): each hazard's smallest delay schedule that damages the values, as JSON, and
replayed with simdist.Targeted it is observed; a clean program exports no hazard."""
import json
import os
import re
import subprocess
import sys

import torch

import simdist
from simdist import witness

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def side_stream_no_wait():
    """A side stream reads what the default stream writes, without waiting (read-after-write)."""
    x = torch.randn(256, 256, device="cuda")
    x = torch.tanh(x) * 3.0
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        y = x.sum(dim=0)
    torch.cuda.current_stream().wait_stream(side)
    return y


def side_stream_synced():
    x = torch.randn(256, 256, device="cuda")
    x = torch.tanh(x) * 3.0
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        y = x.sum(dim=0)
    torch.cuda.current_stream().wait_stream(side)
    return y


def same_bytes_race():
    """Two streams write the same bytes with no order: a real write-after-write race whose damage can never show
    (both write zeros), so no schedule is a witness."""
    x = torch.zeros(1024, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        x.zero_()
    x.zero_()
    torch.cuda.current_stream().wait_stream(side)
    return x


def _runner(fn, world_size=1):
    return lambda policy: simdist.run(fn, world_size=world_size, policy=policy)


def test_witness_replayed_with_targeted_is_observed(tmp_path):
    res = simdist.run(side_stream_no_wait, policy="none")
    assert [h.kind for h in res.hazards] == ["read-after-write"] and not res.hazards[0].observed
    entries, stats = witness.find(_runner(side_stream_no_wait), res)
    doc = witness.export(str(tmp_path / "w.json"), res, entries, stats, target="side_stream_no_wait")
    e, = doc["hazards"]
    w = e["witness"]
    assert w is not None and len(w["delays"]) == 1
    d = w["delays"][0]
    # the first access's op (the default stream's write of x) is the one made slow
    assert (d["rank"], d["stream"], d["seq"]) == tuple(e["first"]["key"])
    assert d["op"] == e["first"]["op"] == "mul.Tensor" and d["delay_ns"] > 0
    replayed = simdist.run(side_stream_no_wait, policy=witness.targeted(w))
    assert any(h.kind == "read-after-write" and h.observed for h in replayed.hazards)
    # smallest on the ladder and bisection: a quarter less does not show it
    less = simdist.Targeted({tuple(d["key"]): d["delay_ns"] * 3 // 4}, simdist.NoJitter())
    assert not any(h.observed for h in simdist.run(side_stream_no_wait, policy=less).hazards)


def test_witness_json_has_the_fields(tmp_path):
    res = simdist.run(side_stream_no_wait, world_size=2, seed=3)
    entries, stats = witness.find(_runner(side_stream_no_wait, 2), res)
    path = tmp_path / "w.json"
    witness.export(str(path), res, entries, stats, target="t")
    doc = json.loads(path.read_text())
    assert doc["format"] == witness.FORMAT and doc["world_size"] == 2 and doc["replay"].startswith("simdist run")
    assert set(doc["search"]) >= {"runs", "seconds", "ladder_ns"}
    e, = doc["hazards"]
    for side in ("first", "second"):
        assert set(e[side]) >= {"rank", "stream", "seq", "op", "write", "shape", "dtype", "site", "key"}
    assert set(e) >= {"kind", "observed_in_run", "witness", "why", "replay", "replay_python", "trials"}
    d, = e["witness"]["delays"]
    assert set(d) >= {"rank", "stream", "seq", "op", "kind", "delay_ns", "sleep_cycles", "key"}
    assert d["sleep_cycles"] == int(d["delay_ns"] * 1.98)
    assert "--policy none --delay-op" in e["replay"] and "--seed" in e["replay"]
    assert any(t["observed"] for t in e["trials"]) and any(not t["observed"] for t in e["trials"])


def test_clean_program_exports_nothing(tmp_path):
    res = simdist.run(side_stream_synced)
    entries, stats = witness.find(_runner(side_stream_synced), res)
    doc = witness.export(str(tmp_path / "w.json"), res, entries, stats)
    assert res.hazards == [] and doc["hazards"] == []


def test_a_race_no_schedule_shows_is_exported_with_null_and_why(tmp_path):
    res = simdist.run(same_bytes_race, policy="none")
    assert res.hazards
    entries, _ = witness.find(_runner(same_bytes_race), res, ladder=(10_000, 1_000_000))
    assert all(e["witness"] is None and "no delay" in e["why"] for e in entries)
    assert all(e["replay"] is None for e in witness.export(str(tmp_path / "w.json"), res, entries, {})["hazards"])


def test_cli_export_witness_and_its_replay_command(tmp_path):
    out_file = tmp_path / "w.json"
    script = os.path.join(ROOT, "tests", "corpus", "streams", "p03_side_stream_no_wait.py")
    p = subprocess.run([sys.executable, "-m", "simdist", "run", script, "-n", "2", "--export-witness", str(out_file)],
                       capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert p.returncode == 1, p.stderr  # hazards found
    assert re.search(r"witness: .*1 hazard\(s\), 1 with a witness schedule", p.stdout)
    doc = json.loads(out_file.read_text())
    e, = doc["hazards"]
    again = subprocess.run([sys.executable, "-m", "simdist", *e["replay"].split()[1:]], capture_output=True,
                           text=True, cwd=ROOT, timeout=300)
    assert "OBSERVED" in again.stdout, again.stdout + again.stderr


def test_gpu_hook_counts_ops_as_simdist_does_and_replays_witnesses():
    # ci/gpu_witness.py's hook (what the GPU job installs on the real CUDA build), run inside simdist: its
    # per-stream op counts equal simdist's op log, and a witness replayed through its sleeps is observed
    sys.path.insert(0, ROOT)
    from ci import gpu_witness as gw
    from ci.source_tree import use_source_tree
    use_source_tree()  # a bare checkout (the GPU machine) has no simdist.properties mapping otherwise
    from simdist.properties.programs import corpus_paths, parse
    names = ("p03_side_stream_no_wait", "q53_first_op_output_freed_reuse", "p29_pipeline_send_recv",
             "p35_reduce_scatter_all_to_all", "r35_object_collectives", "p52_grad_bucket_comm_no_wait_back")
    metas = [parse(p) for p in corpus_paths(os.path.join(ROOT, "tests", "corpus"))]
    metas = [m for m in metas if m["name"] in names]
    assert len(metas) == len(names)
    wit = {}
    for m in metas:
        if m["expected"] == "hazard":
            def runner(policy, m=m):
                return simdist.run_script(m["path"], world_size=m["world_size"], policy=policy)
            res = runner(simdist.NoJitter())
            entries, stats = witness.find(runner, res)
            wit[m["name"]] = witness.export(os.devnull, res, entries, stats)
    rows = gw.check_counts(metas, wit, log=lambda s: None)
    for r in rows:
        assert r["counts_match"] is True, r
        for rep in r.get("witness_replays_through_hook", []):
            assert rep["observed"] and rep["sleeps_at_named_op"], (r["name"], rep)
    assert sum(len(r.get("witness_replays_through_hook", [])) for r in rows) >= 2


class _RealBuildStream:
    """What the real CUDA build's torch.cuda.Stream does (torch/cuda/streams.py, torch/cuda/__init__.py):
    torch.cuda.Stream() takes a new stream; current_stream() and default_stream() wrap an existing one in a new
    Python object through the same __new__, as Stream(stream_id=..., device_index=..., device_type=...)."""

    made = []

    def __new__(cls, device=None, priority=0, **kwargs):
        self = object.__new__(cls)
        if "stream_id" in kwargs:
            self.stream_id, self.device_index = kwargs["stream_id"], kwargs["device_index"]
        else:
            cls.made.append(self)
            self.stream_id, self.device_index = 100 + len(cls.made), 0
        return self

    def __eq__(self, other):
        return (self.stream_id, self.device_index) == (other.stream_id, other.device_index)

    def __hash__(self):
        return hash((self.stream_id, self.device_index))


def test_gpu_hook_names_streams_as_the_real_build_makes_them(monkeypatch):
    # on the GPU (2026-12-01) every torch.cuda.current_stream() looked like a new stream to the hook: the real build
    # makes those objects through Stream.__new__ too; only torch.cuda.Stream() itself makes a stream
    sys.path.insert(0, ROOT)
    from ci import gpu_witness as gw
    current = [0]
    _RealBuildStream.made = []
    monkeypatch.setattr(torch.cuda, "Stream", _RealBuildStream)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: _RealBuildStream(
        stream_id=current[0], device_index=0, device_type=1))
    monkeypatch.setattr(torch.cuda, "default_stream", lambda device=None: _RealBuildStream(
        stream_id=0, device_index=0, device_type=1))
    hook = gw.OpHook(0)
    with hook:
        assert hook.name_of(torch.cuda.current_stream()) == "rank0/cuda:0/default"
        side = torch.cuda.Stream()
        assert hook.name_of(torch.cuda.current_stream()) == "rank0/cuda:0/default"
        current[0] = side.stream_id  # with torch.cuda.stream(side):
        assert hook.name_of(torch.cuda.current_stream()) == "rank0/cuda:0/stream1"
        other = torch.cuda.Stream()
        current[0] = other.stream_id
        assert hook.name_of(torch.cuda.current_stream()) == "rank0/cuda:0/stream2"
        current[0] = 0
        assert hook.name_of(torch.cuda.current_stream()) == "rank0/cuda:0/default"
    assert len(_RealBuildStream.made) == 2
