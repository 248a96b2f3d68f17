"""The incident suite (issue 14): public race bugs, each as a buggy program and its fixed twin, modelled on the real
code at the incident's link (tests/corpus/incidents/, list and sources in ../shared/INCIDENTS.md; table in
docs/incidents.md). tests/test_programs.py runs the same programs for their verdicts with the rest of the corpus;
this file checks what an incident suite has to show beyond a verdict:

- every program's verdict (EXPECTED, KINDS, KINDS_ALSO, ERROR in its docstring) for seeds 0..4;
- every buggy program's report points at the missing edge: some hazard's first and second accesses have frames in
  the program file on the lines that write and read across the missing order (EDGES below);
- the race can damage values, and does: some seed, or the targeted policy (the first access delayed by 10 ms),
  reports the hazard as observed;
- deadlock and mismatch errors name the blocked / mismatched calls of the program;
- where the reporter's diagnosis does not follow from PyTorch's semantics (I4, I7, I8 FULL_SHARD, I9 with FSDP2's
  ref-hold), the clean verdict is not vacuous: a control copy of the program, changed so that the edge really is
  missing, is reported;
- the variants that drive the real library (`*_real_*.py`: torch's own `_coalescing_manager`, DDP, FSDP1 with
  pull/91096's record_stream removed and restored, FSDP2), whose verdicts test_verdict checks like every other.

Failures that are simdist's, not the program's, are xfail(strict=True) naming their entry in
docs/dev/engine-bugs/incidents.md.
"""
import contextlib
import io
import os

import pytest

import simdist
from simdist.properties.programs import corpus_paths, parse, run_options

HERE = os.path.dirname(os.path.abspath(__file__))
INCIDENTS = os.path.join(HERE, "corpus", "incidents")
PROGRAMS = corpus_paths(INCIDENTS)
NAMES = [os.path.basename(p)[:-3] for p in PROGRAMS]
SEEDS = range(5)
TARGET_DELAY_NS = 10_000_000
ENGINE_BUGS = "docs/dev/engine-bugs/incidents.md"

# program -> [(text on the first access's line, text on the second access's line)]: the missing edge, one pair per
# race the incident had (each must be reported)
EDGES = {
    "i01_horovod_allreduce_ready_event_bug": [("mul_(0.5)", "fusion_buffer[offset:offset + t.numel()].copy_(")],
    "i02_deepspeed_ipg_bucket_streams_bug": [("new_grad_tensor.copy_(grad_reduc.view(-1))", "tensor.div_(world)")],
    "i03_te_cp_softmax_lse_stream_bug": [("lse.transpose(0, 1).contiguous().unsqueeze(-1)",
                                          "softmax_lse_per_step[i - 1].transpose(0, 1).contiguous()")],
    "i05_nemorl_packed_broadcast_bug": [("model[name].copy_(t)", "(x @ model[n]).sum()"),
                                        ("torch.cat(packing_tensor_list[buffer_idx], dim=0)", "params[n].add_(0.01)")],
    "i06_torch_coalescing_manager_bug": [("dist.reduce_scatter_tensor(out, inp",
                                          "params_shard[b].sub_(sync_grads_shard[b]")],
    "i08_torch_fsdp_mp_shard_bug": [("x @ h.unsharded.view(D, D)", "self._mp_shard.copy_(self._local_shard)")],
    "i09_torch_fsdp2_chunked_loss_bug": [("dist.reduce_scatter_tensor(reduce_output, reduce_scatter_input)",
                                          "unsharded_grad = dlogits.t() @ h")],
    "i10_deepspeed_pingpong_index_bug": [("narrow(0, off, NUMEL).clone()",
                                          "narrow(0, bucket.elements, NUMEL).copy_(grad)")],
    "i11_dgl_sparse_adam_d2h_bug": [("update_mem.to(state_dev, non_blocking=True)",
                                     "update_mem.to(state_dev, non_blocking=True)")],
}
# program -> texts the error message must contain (the call sites of the blocked / mismatched calls)
ERROR_SITES = {
    "i12_torch_p2p_interleaved_bug": ['dist.irecv(got["a"], src=1)', 'dist.isend(t["b"], dst=1)'],
    "i13_speechbrain_ckpt_decision_bug": ["dist.barrier()", "dist.broadcast(running_mean, src=0)"],
}
XFAIL_VERDICT = {}  # program -> the engine-bugs entry that makes simdist's verdict wrong (none open)

_runs = {}


def run(path, seed, nccl=None, policy=None):
    """One simdist run of a program (cached): (RunResult or None, exception or None)."""
    meta = parse(path)
    opts = run_options(meta)
    if nccl:
        opts["nccl"] = nccl
    key = (path, seed, opts.get("nccl"), repr(policy))
    if key not in _runs:
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                res = simdist.run_script(path, world_size=meta["world_size"], seed=seed, policy=policy, **opts)
            _runs[key] = (res, None)
        except Exception as e:  # noqa: BLE001
            _runs[key] = (None, e)
    return _runs[key]


def lines_in(access, path):
    """The source lines of the frames of one access that are in the program file."""
    with open(path) as f:
        src = f.read().splitlines()
    return [src[line - 1] for file, line, _fn in access.stack if os.path.abspath(file) == os.path.abspath(path)]


def reports_edge(hazard, path, first_text, second_text):
    return (any(first_text in s for s in lines_in(hazard.first, path))
            and any(second_text in s for s in lines_in(hazard.second, path)))


def _path(name):
    return PROGRAMS[NAMES.index(name)]


def _verdict_params():
    out = []
    for path, name in zip(PROGRAMS, NAMES):
        marks = [pytest.mark.xfail(strict=True, reason=XFAIL_VERDICT[name])] if name in XFAIL_VERDICT else []
        out.append(pytest.param(path, id=name, marks=marks))
    return out


def test_every_incident_has_a_bug_and_a_fix():
    for n in range(1, 14):
        mine = [name for name in NAMES if name.startswith(f"i{n:02d}_")]
        assert any(name.endswith("_bug") for name in mine) and any(name.endswith("_fix") for name in mine), mine
        for name in mine:                         # each names its incident's link and what it modelled
            with open(_path(name)) as f:
                doc = f.read().split('"""')[1]
            assert "INCIDENT:" in doc and "https://github.com/" in doc and "MODELLED ON:" in doc and "RULE:" in doc, name


@pytest.mark.parametrize("path", _verdict_params())
def test_verdict(path):
    meta = parse(path)
    kinds, also, errors = set(meta["kinds"]), set(meta["kinds_also"]), set(meta["errors"])
    for seed in SEEDS:
        res, err = run(path, seed)
        if err is not None:
            names = {c.__name__ for c in type(err).__mro__}
            assert meta["expected"] in ("error", "clean-or-error") and names & errors, \
                f"seed {seed}: {type(err).__name__}: {err}"
            continue
        assert meta["expected"] != "error", f"seed {seed}: expected {errors}, the run succeeded"
        found = {h.kind for h in res.hazards}
        if meta["expected"] in ("clean", "clean-or-error"):
            assert not found, f"seed {seed}: false positive\n{res.report()}"
        else:
            assert kinds and kinds <= found <= kinds | also, f"seed {seed}: kinds {found}, expected {kinds}"


@pytest.mark.parametrize("name", sorted(EDGES))
def test_report_points_at_the_missing_edge(name):
    path = _path(name)
    for seed in SEEDS:
        res, err = run(path, seed)
        assert err is None, err
        for first_text, second_text in EDGES[name]:
            assert any(reports_edge(h, path, first_text, second_text) for h in res.hazards), \
                f"seed {seed}: no hazard from `{first_text}` to `{second_text}`\n{res.report()}"


@pytest.mark.parametrize("name", sorted(EDGES))
def test_race_damages_values(name):
    """Some seed, or the targeted policy, shows the damage (Hazard.observed) on the missing edge."""
    path = _path(name)

    def observed(res):
        return any(h.observed and reports_edge(h, path, *EDGES[name][0]) for h in res.hazards)

    if any(observed(run(path, seed)[0]) for seed in SEEDS):
        return
    res, _ = run(path, 0)
    delays = {h.first_op_key: TARGET_DELAY_NS for h in res.hazards}
    targeted, err = run(path, 0, policy=simdist.Targeted(delays))
    assert err is None, err
    assert observed(targeted), targeted.report()


@pytest.mark.parametrize("name", sorted(ERROR_SITES))
def test_error_names_the_calls(name):
    path = _path(name)
    _res, err = run(path, 0)
    assert err is not None
    message = str(err)
    assert os.path.basename(path) in message, message
    for text in ERROR_SITES[name]:
        assert text in message, f"`{text}` not in\n{message}"


def control(name, tmp_path, *replacements):
    """A copy of a program, in tmp_path, with edits that remove an edge (each replacement must apply)."""
    with open(_path(name)) as f:
        src = f.read()
    for old, new in replacements:
        assert old in src, old
        src = src.replace(old, new)
    path = str(tmp_path / f"{name}_control.py")
    with open(path, "w") as f:
        f.write(src)
    return path


def test_i04_clean_under_both_profiles_and_the_control_is_not(tmp_path):
    """ms-swift's diagnosis (the bucket copy_ reads the gathered weights too early) does not follow from either
    profile: the synchronous all-gathers order the copy. Made asynchronous and never waited, they do not."""
    for name in ("i04_msswift_bucket_copy_bug", "i04_msswift_bucket_copy_fix"):
        for nccl in ("2.7", "2.8"):
            for seed in (0, 1):
                res, err = run(_path(name), seed, nccl=nccl)
                assert err is None and not res.hazards, (name, nccl, err or res.report())
    path = control("i04_msswift_bucket_copy_bug", tmp_path,
                   ("dist.all_gather_into_tensor(output, tensor)",
                    "dist.all_gather_into_tensor(output, tensor, async_op=True)"),
                   ("dist.all_gather(output, tensor)", "dist.all_gather(output, tensor, async_op=True)"),
                   ('assert torch.equal(t, full_weight(name)), f"{name} wrong"', "pass"))
    res, err = run(path, 0)
    assert err is None, err
    assert any(h.kind == "read-after-write" and reports_edge(h, path, "all_gather", "copy_(tensor.flatten())")
               for h in res.hazards), res.report()


def test_i07_record_stream_matters_only_without_the_backward_join(tmp_path):
    """2019 DDP's flow orders the next allocation on a worker stream after the all-reduce through the backward
    stream, so both twins are clean. Without queueReduction's wait on the backward stream, the block freed by
    `_sync_reduction_works` is reused while the all-reduce may still use it, unless the flat tensor recorded the
    NCCL stream (pull/18465)."""
    no_join = [("    worker.wait_event(event)                              # events[devIdx].block(workerStreams"
                ".back())\n", ""),
               ('        assert torch.allclose(p.cpu(), ref, atol=1e-5), f"bucket {b} wrong"', "        pass")]

    def reuse_of_allreduce(res):
        return [h for h in res.hazards if h.kind == "reuse-after-free" and "all_reduce" in h.first.op]

    bug, err = run(control("i07_torch_ddp_flat_bucket_bug", tmp_path, *no_join), 0)
    assert err is None, err
    assert reuse_of_allreduce(bug), bug.report()
    fix_path = control("i07_torch_ddp_flat_bucket_fix", tmp_path, *no_join)
    for seed in SEEDS:
        fix, err = run(fix_path, seed)
        assert err is None, err
        assert not reuse_of_allreduce(fix), fix.report()


def test_i08_fullshard_needs_record_stream_only_without_process_group_record_stream():
    """FULL_SHARD without pull/91096: clean with torch <= 2.7's ProcessGroupNCCL (which record_streams the
    all-gather's input), reuse-after-free with torch >= 2.8's (which does not); the fixed twin is clean under both."""
    bug = _path("i08_torch_fsdp_mp_shard_fullshard_bug")
    reported = damaged = False
    for seed in SEEDS:
        res, err = run(bug, seed, nccl="2.8")
        if err is not None:
            assert isinstance(err, AssertionError), err   # the program's own check of its output: damage
            damaged = True
        else:
            reported |= any(h.kind == "reuse-after-free" and reports_edge(
                h, bug, "dist.all_gather_into_tensor(self.unsharded, self._mp_shard)",
                "self._mp_shard.copy_(self._local_shard)") for h in res.hazards)
    assert reported, "reuse-after-free not reported under NCCL 2.8"
    assert damaged, "no seed damaged the output under NCCL 2.8"
    for nccl in ("2.7", "2.8"):
        for seed in SEEDS:
            res, err = run(_path("i08_torch_fsdp_mp_shard_fullshard_fix"), seed, nccl=nccl)
            assert err is None and not res.hazards, (nccl, seed, err or res.report())


def test_i09_refhold_is_what_closes_vector_1(tmp_path):
    """FSDP2's structure without pull/181218's wait is clean; dropping the ref-hold (the reduce-scatter input freed
    at the end of foreach_reduce, never waited) gives the standalone repro's reuse-after-free."""
    path = control("i09_torch_fsdp2_chunked_loss_refhold_bug", tmp_path,
                   ("        reduce_scatter_states.append((reduce_scatter_input, reduce_scatter_event))   # the "
                    "ref-hold\n", ""),
                   ('    assert torch.allclose(sharded_param.cpu(), ref, atol=1e-5), "updated shard wrong"',
                    "    pass"))
    res, err = run(path, 0)
    assert err is None, err
    assert any(h.kind == "reuse-after-free" and reports_edge(
        h, path, "reduce_scatter_tensor(reduce_output, reduce_scatter_input)", "unsharded_grad = dlogits.t() @ h")
        for h in res.hazards), res.report()
