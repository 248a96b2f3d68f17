"""Reusable properties: call them inside a Hypothesis test (or any test); they raise on violation.

Every failure names simdist's replay command (`RunResult.replay`) and, for the example Hypothesis reports (its
final replay of the shrunk failure) or outside Hypothesis, the path of a Perfetto trace of that run
(`RunResult.save_trace`; directory $SIMDIST_TRACE_DIR, default `.hypothesis/simdist-traces`). Hypothesis adds its
reproduce blob (`print_blob` in every simdist profile). Where hazards exist, `hypothesis.target` is told the
largest `Hazard.slack_ns` (how far the racing producer ran past its consumer; > 0 is the damaging order), which
steers the search toward schedules where a race turns into damage.
"""
from __future__ import annotations

import math
import os

import simdist
from simdist import DeterminismError, HazardError

from . import campaign
from .strategies import Schedule


class PropertyFailure(AssertionError):
    """A property of the refit stack or the incident kernel does not hold for this case and schedule."""


# ------------------------------------------------------------------------------------------------ helpers
def _final():
    """True outside Hypothesis, or in its final replay of the (shrunk) failing example."""
    try:
        from hypothesis.control import current_build_context, currently_in_test_context
        return not currently_in_test_context() or current_build_context().is_final
    except Exception:  # noqa: BLE001
        return True


def trace_dir():
    return os.environ.get(campaign.TRACE_ENV) or os.path.join(".hypothesis", "simdist-traces")


def _save_trace(res, name):
    path = os.path.abspath(os.path.join(trace_dir(), f"{name}-{res.digest[:12]}.trace.json"))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    res.save_trace(path)
    return path


def _where(res, name):
    """Replay command and (final example only) trace path, as lines for a failure message."""
    lines = [f"simdist replay: {res.replay}"]
    trace = None
    if _final():
        trace = _save_trace(res, name)
        lines.append(f"Perfetto trace of this failure: {trace}  (open in https://ui.perfetto.dev)")
    else:
        lines.append("(the trace is written for the shrunk example Hypothesis reports)")
    return lines, trace


#: False turns the slack targeting off (`python -m simdist.properties.timetofind --no-target`: its ablation)
TARGETING = True


def _target(res):
    """Guide Hypothesis toward schedules where a racing consumer runs before its producer finished."""
    if not TARGETING:
        return
    try:
        from hypothesis import target
        from hypothesis.control import currently_in_test_context
        if not currently_in_test_context():
            return
        slack = [h.slack_ns for h in res.hazards if h.slack_ns is not None]
        if slack:
            target(float(max(slack)), label="hazard slack: producer end minus consumer end (ns)")
    except Exception:  # noqa: BLE001 - targeting is a hint, never a failure
        pass


def _annotate(err, res, name):
    lines, _ = _where(res, name)
    for line in lines:
        err.add_note(line)
    return err


# ------------------------------------------------------------------------------------------------ any program
def _log_run(prop, fn, res, ok, failure=None):
    """Campaign log entry for a property over any program (configuration: the program and its world size)."""
    if os.environ.get(campaign.LOG_ENV):
        name = getattr(fn, "__qualname__", getattr(fn, "__name__", repr(fn)))
        campaign.record(prop, {"program": name, "world_size": res.world_size, "nccl": res.nccl}, res.policy, ok,
                        failure=failure, replay=res.replay, final=_final(), world=res.world_size)


def no_hazards(fn, *, world_size=1, policy=None, seed=0, **kw):
    """No pair of unordered conflicting accesses, in any schedule (detection is schedule-independent)."""
    res = simdist.run(fn, world_size=world_size, policy=policy, seed=seed, **kw)
    _log_run("no_hazards", fn, res, not res.hazards, failure=f"{len(res.hazards)} hazard(s)")
    if res.hazards:
        _target(res)
        raise _annotate(HazardError(res.hazards), res, "no_hazards")
    return res


def values_unaffected(fn, *, world_size=1, policy=None, seed=0, **kw):
    """This schedule damaged no value (no hazard is `observed`). Hypothesis searches schedules to break it."""
    res = simdist.run(fn, world_size=world_size, policy=policy, seed=seed, **kw)
    _target(res)
    bad = [h for h in res.hazards if h.observed]
    _log_run("values_unaffected", fn, res, not bad, failure=f"{len(bad)} observed hazard(s)")
    if bad:
        raise _annotate(HazardError(bad), res, "values_unaffected")
    return res


def deterministic(fn, *, world_size=1, policy=None, seed=0, **kw):
    """Two runs of the same (program, seed, policy) give the same digest."""
    a = simdist.run(fn, world_size=world_size, policy=policy, seed=seed, **kw)
    b = simdist.run(fn, world_size=world_size, policy=_fresh(policy), seed=seed, **kw)
    _log_run("deterministic", fn, a, a.digest == b.digest, failure="digests differ")
    if a.digest != b.digest:
        raise _annotate(DeterminismError(f"digests differ: {a.digest} != {b.digest}"), a, "deterministic")
    return a


def _fresh(policy):
    import copy
    return copy.deepcopy(policy) if policy is not None and not isinstance(policy, (str, list, tuple)) else policy


def metric_below(errors, bound=1.05):
    """token_mult_prob_error of every step is finite and in [1, bound) (NeMo-RL's acceptance)."""
    bad = [(i, e) for i, e in enumerate(errors) if not (math.isfinite(e) and 1.0 <= e < bound)]
    if bad:
        raise AssertionError(f"token_mult_prob_error out of [1, {bound}) at steps {bad}")


# ------------------------------------------------------------------------------------------------ the refit stack
def run_refit(case, schedule=None, **kw):
    """The fakes' GRPO refit loop for a `strategies.refit_cases()` case under a `Schedule` (default: quiet)."""
    sched = schedule or Schedule()
    return simdist.run(campaign.refit_case, world_size=campaign.world_of(case), nccl=case.get("nccl"),
                       kwargs=campaign.program_kwargs(case), **sched.run_kwargs(), **kw)


def run_kernel(case, schedule=None, **kw):
    """The incident kernel for a `strategies.kernel_cases()` case under a `Schedule` (default: quiet)."""
    sched = schedule or Schedule()
    return simdist.run(campaign.incident_kernel, world_size=campaign.world_of(case), nccl=case.get("nccl"),
                       kwargs=campaign.program_kwargs(case), **sched.run_kwargs(), **kw)


def _verdict(prop, case, schedule, res, problems, record_as):
    """Log the example (unless `record_as` is None); on problems raise one PropertyFailure (one raise site, so
    Hypothesis sees one bug per property and shrinks it once)."""
    name = record_as or prop
    if not problems:
        if record_as is not None:
            campaign.record(name, case, schedule, True, world=campaign.world_of(case))
        return
    lines, trace = _where(res, name)
    msg = "\n".join([f"{prop} fails for {campaign.describe(case)} under {schedule or Schedule()}:"]
                    + [f"  {p}" for p in problems[:8]] + lines)
    if record_as is not None:
        campaign.record(name, case, schedule, False, failure=msg, replay=res.replay, trace=trace, final=_final(),
                    world=campaign.world_of(case))
    raise PropertyFailure(msg)


def _hazard_lines(res):
    kinds = sorted({h.kind for h in res.hazards})
    h = res.hazards[0]
    a, b = h.first, h.second
    return [f"{len(res.hazards)} hazard(s) ({', '.join(kinds)}); first: {h.kind}"
            f"{' [OBSERVED]' if h.observed else ''}: {a.op} on {a.stream} and {b.op} on {b.stream}, unordered"]


def refit_equals_reference(case, schedule=None, *, hazards=True, bound=1.05, record_as="refit_equals_reference"):
    """Every rank's refitted HF weights are bit-identical to the no-parallelism reference at every step, and
    token_mult_prob_error is in [1, `bound`); with `hazards`, no hazard either. `hazards=False` is the property a
    fuzzer without the detector checks (on GPUs: only damage shows)."""
    res = run_refit(case, schedule)
    _target(res)
    problems = []
    for rank, recs in enumerate(res.returns):
        for r in recs:
            if r["mismatched"]:
                problems.append(f"rank {rank} step {r['step']}: refit differs from the reference in "
                                f"{len(r['mismatched'])} weight(s), e.g. {r['mismatched'][:3]}"
                                + (f"; NaN in {r['nan_weights'][:2]}" if r["nan_weights"] else ""))
            m = r["metric"]
            if not (math.isfinite(m) and 1.0 <= m < bound):
                problems.append(f"rank {rank} step {r['step']}: token_mult_prob_error {m} not in [1, {bound})")
    if hazards and res.hazards:
        problems += _hazard_lines(res)
    _verdict("refit_equals_reference", case, schedule, res, problems, record_as)
    return res


def refit_deterministic(case, schedule=None, record_as="refit_deterministic"):
    """Two runs of the same case and schedule give the same digest (trace, hazards and returned values)."""
    try:
        res = run_refit(case, schedule, check_determinism=True)
    except DeterminismError as e:
        res = run_refit(case, schedule)
        _verdict("refit_deterministic", case, schedule, res, [str(e).splitlines()[0]], record_as)
        raise
    _verdict("refit_deterministic", case, schedule, res, [], record_as)
    return res


def schedule_free_without_hazards(case, schedule=None, run=run_refit, record_as="schedule_free_without_hazards"):
    """What the detector promises, over fault sets: a run with no hazard computes the same values (per-step
    weight digests, mismatches and metric) under any schedule as under the quiet one, so a schedule can only damage
    values through a reported hazard. A fault that breaks a data path without a race (no hazard) damages every
    schedule alike."""
    res = run(case, schedule)
    _target(res)
    problems = []
    if not res.hazards and schedule is not None and schedule != Schedule():
        quiet = run(case, None)
        if quiet.hazards:
            problems.append(f"the quiet schedule reports {len(quiet.hazards)} hazard(s), this one none")
        for rank, (a, b) in enumerate(zip(res.returns, quiet.returns)):
            if _values(a) != _values(b):
                problems.append(f"rank {rank}: values differ from the quiet schedule's with no hazard reported: "
                                f"{_values(a)} vs {_values(b)}"[:400])
    _verdict("schedule_free_without_hazards", case, schedule, res, problems, record_as)
    return res


def _values(recs):
    out = []
    for r in recs:
        if isinstance(r, dict):
            m = r.get("metric")
            out.append((r.get("digest"), tuple(r.get("mismatched", ())), None if m is None or m != m else round(m, 9)))
        else:
            out.append(repr(r))
    return out


# ------------------------------------------------------------------------------------------------ the incident kernel
def kernel_matches_reference(case, schedule=None, *, hazards=True, record_as="kernel_matches_reference"):
    """The incident kernel's gathered weights are bit-identical to the CPU reference on every rank; with
    `hazards`, no hazard either."""
    import torch
    res = run_kernel(case, schedule)
    _target(res)
    ref = campaign.kernel_reference(case)
    problems = []
    for rank, outs in enumerate(res.returns):
        bad = [i for i, (a, b) in enumerate(zip(outs, ref))
               if a.shape != b.shape or not torch.equal(a.view(torch.int16), b.view(torch.int16))]
        if bad:
            problems.append(f"rank {rank}: gathered weight(s) {bad} differ from the reference")
    if hazards and res.hazards:
        problems += _hazard_lines(res)
    _verdict("kernel_matches_reference", case, schedule, res, problems, record_as)
    return res


def sync_pair_exists(case):
    """Whether the pair the kernel's sync orders exists in this case: always, except `record_stream`, which
    matters only when a later weight can reuse the freed block (>= 2 weights) and the gather does not
    record_stream its input itself (NCCL 2.7's ProcessGroupNCCL does)."""
    return case["sync"] != "record_stream" or (case["weights"] >= 2 and case.get("nccl") != "2.7")


def dropped_sync_is_reported(case, schedule=None, record_as="dropped_sync_is_reported"):
    """The detector on mutants: with its sync dropped, the incident kernel reports a hazard exactly where the pair
    that sync ordered exists (`sync_pair_exists`), under any schedule."""
    case = dict(case, drop=True)
    res = run_kernel(case, schedule)
    expected = sync_pair_exists(case)
    problems = []
    if bool(res.hazards) != expected:
        problems.append(f"without {case['sync']}: {len(res.hazards)} hazard(s) reported, expected "
                        f"{'some' if expected else 'none'}")
    _verdict("dropped_sync_is_reported", case, schedule, res, problems, record_as)
    return res
