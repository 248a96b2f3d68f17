"""Reusable properties: call them inside a Hypothesis test (or any test); they raise on violation."""
from __future__ import annotations

import simdist
from simdist.errors import DeterminismError, HazardError


def no_hazards(fn, *, world_size=1, policy=None, seed=0, **kw):
    """No pair of unordered conflicting accesses, in any schedule (detection is schedule-independent)."""
    res = simdist.run(fn, world_size=world_size, policy=policy, seed=seed, **kw)
    if res.hazards:
        _target(res)
        raise HazardError(res.hazards)
    return res


def values_unaffected(fn, *, world_size=1, policy=None, seed=0, **kw):
    """This schedule damaged no value (no hazard is `observed`). Hypothesis searches schedules to break it."""
    res = simdist.run(fn, world_size=world_size, policy=policy, seed=seed, **kw)
    _target(res)
    bad = [h for h in res.hazards if h.observed]
    if bad:
        raise HazardError(bad)
    return res


def deterministic(fn, *, world_size=1, policy=None, seed=0, **kw):
    """Two runs of the same (program, seed, policy) give the same digest."""
    a = simdist.run(fn, world_size=world_size, policy=policy, seed=seed, **kw)
    b = simdist.run(fn, world_size=world_size, policy=_fresh(policy), seed=seed, **kw)
    if a.digest != b.digest:
        raise DeterminismError(f"digests differ: {a.digest} != {b.digest}")
    return a


def _fresh(policy):
    import copy
    return copy.deepcopy(policy) if policy is not None and not isinstance(policy, (str, list, tuple)) else policy


def _target(res):
    """Guide Hypothesis toward schedules where a racing consumer runs before its producer finished."""
    try:
        from hypothesis import target
        from hypothesis.control import _current_build_context
        if _current_build_context.value is None:
            return
        slack = [h.slack_ns for h in res.hazards if h.slack_ns is not None]
        if slack:
            target(float(max(slack)), label="producer end minus consumer read (ns)")
    except Exception:  # noqa: BLE001 - targeting is a hint, never a failure
        pass


def metric_below(errors, bound=1.05):
    """token_mult_prob_error of every step is finite and below `bound` (NeMo-RL's acceptance)."""
    import math
    bad = [(i, e) for i, e in enumerate(errors) if not (math.isfinite(e) and 1.0 <= e < bound)]
    if bad:
        raise AssertionError(f"token_mult_prob_error out of [1, {bound}) at steps {bad}")


def refit_equals_reference(config, *, tp=1, pp=1, ep=1, steps=2, faults=(), policy=None, seed=0, nccl=None):
    """Every rank's refitted HF weights are bit-identical to the no-parallelism reference at every step, no
    hazard, and token_mult_prob_error is in [1, 1.05). Runs the fakes' GRPO refit loop in a simulated world."""
    from simdist.fakes import nemo_rl
    world = tp * pp * max(1, ep if ep > tp else 1)
    res = simdist.run(nemo_rl.grpo_refit_loop, world_size=world, seed=seed, policy=policy, nccl=nccl,
                      args=(config,), kwargs=dict(tp=tp, pp=pp, ep=ep, steps=steps, faults=frozenset(faults)))
    if res.hazards:
        raise HazardError(res.hazards)
    for rank, recs in enumerate(res.returns):
        for r in recs:
            if r["mismatched"]:
                raise AssertionError(f"rank {rank} step {r['step']}: refit differs from the reference in "
                                     f"{r['mismatched'][:5]}")
        metric_below([r["token_mult_prob_error"] for r in recs])
    return res
