"""The fuzz campaign's properties over the refit stack's whole space (fakes) and the incident kernel.

Budgets come from the Hypothesis profile (`ci`: small, derandomized; `dev`; `nightly`: 100x `ci`, with the
shared example database): `@P.fuzz(cost=N)` declares what one example costs, never how many to run.
`bash ci/fuzz` runs these on every core with the `nightly` profile. Environment knobs of a campaign:

- SIMDIST_FUZZ_PLANT=name[,name]: plant fault switches of the fakes (`simdist.fakes.megatron_core.FAULTS`) into the
  refit properties, or drop syncs of the incident kernel (`simdist.properties.SYNCS`): a mutant campaign, to see
  the fuzzer find a known bug (the time-to-find benchmark does this for each one);
- SIMDIST_FUZZ_MAX_WORLD: the largest simulated world drawn (default 8);
- SIMDIST_FUZZ_KNOWN=include: also fuzz the regions of the known findings below (skipped by default, so a
  campaign looks for new failures; each finding has a test that it still reproduces).
"""
import os

from hypothesis import assume, given

import simdist.properties as P


def _plant():
    from simdist.fakes.megatron_core import FAULTS
    names = [n for n in os.environ.get("SIMDIST_FUZZ_PLANT", "").split(",") if n]
    unknown = sorted(set(names) - set(FAULTS) - set(P.SYNCS))
    if unknown:
        raise ValueError(f"SIMDIST_FUZZ_PLANT: unknown {unknown}; fault switches {sorted(FAULTS)}, syncs {P.SYNCS}")
    drops = [n for n in names if n in P.SYNCS]
    return frozenset(n for n in names if n in FAULTS), (drops[0] if drops else None)


FAULTS, DROP = _plant()
MAX_WORLD = int(os.environ.get("SIMDIST_FUZZ_MAX_WORLD", "8"))
INCLUDE_KNOWN = os.environ.get("SIMDIST_FUZZ_KNOWN") == "include"


def _packed_broadcast_after_overlapped_param_gather(case):
    return case["refit"] == "packed-broadcast" and case["dp"] >= 2 and (
        case["overlap_param_gather"] or case.get("overlap_param_gather_with_optimizer_step"))


_SMALLEST = {"tp": 1, "pp": 1, "dp": 2, "ep": 1, "recipe": "bf16", "fp8_param": False,
             "shape": {"hidden_size": 8, "num_attention_heads": 1, "num_query_groups": 1, "kv_channels": 8,
                       "ffn_hidden_size": 8, "num_layers": 1, "vocab_size": 16, "num_moe_experts": None},
             "steps": 2, "refit": "packed-broadcast", "overlap_param_gather": True,
             "overlap_param_gather_with_optimizer_step": False, "group_bytes": 1 << 20, "nccl": "2.8", "faults": []}

#: Failures of the faithful stack that the campaign found, with the region they fill and their shrunk example.
#: - packed broadcast after an overlapped DP param all-gather (found by test_refit_equals_reference in its first
#:   campaign, shrunk by Hypothesis to DP=2, bf16, 1 layer, step 2, no delay): NeMo-RL's packed broadcast exports
#:   on its own side streams, which never wait on the current stream, so with overlap_param_gather and DP >= 2 the
#:   export's `cat` reads parameters the DP all-gather (NCCL stream) may still be writing, even after
#:   finish_param_sync() (which orders only the current stream): read-after-write, stale weights at step 2,
#:   token_mult_prob_error 1.072. No fix switch of the fakes covers it.
#: - packed broadcast of FP8 params (found by a 2-worker `dev` campaign; shrunk to TP=1, one rank, 2 layers of
#:   blockwise-pow2 params, step 1, no delay): one conversion task yields several HF tensors made from one
#:   dequantized weight (fc1 -> gate/up, qkv -> q/k/v), and the packed broadcast's buffer rounds (each on its own
#:   side stream) can fall between them: a tensor dequantized (`_to_copy`) on one side stream is packed (`cat`) on
#:   the other, which never waited for it: read-after-write. Every FP8 recipe; with bf16 params the pieces are
#:   views of parameters written before the refit. Where the rounds fall depends on the sizes, so the region is
#:   all of packed broadcast with FP8 params.
KNOWN_FINDINGS = {"packed_broadcast_after_overlapped_param_gather":
                  (_packed_broadcast_after_overlapped_param_gather, _SMALLEST),
                  "packed_broadcast_of_fp8_params":
                  (lambda case: case["refit"] == "packed-broadcast" and case["fp8_param"],
                   dict(_SMALLEST, dp=1, recipe="blockwise-pow2", fp8_param=True, steps=1,
                        shape={"hidden_size": 256, "num_attention_heads": 1, "num_query_groups": 1,
                               "kv_channels": 128, "ffn_hidden_size": 128, "num_layers": 2, "vocab_size": 16,
                               "num_moe_experts": None}))}


def _not_known(case):
    if not INCLUDE_KNOWN:
        assume(not any(region(case) for region, _ in KNOWN_FINDINGS.values()))


@P.fuzz(cost=5)
@given(case=P.refit_cases(max_world=MAX_WORLD, faults=FAULTS), schedule=P.run_schedules())
def test_refit_equals_reference(case, schedule):
    """TP / PP / EP / DP, every recipe, FP8 params on/off, uneven and MoE shapes, 1-3 GRPO steps, colocated or
    broadcast refit, NCCL 2.7 / 2.8, choice / PCT / jitter schedules: every rank's refitted weights equal the
    no-parallelism reference at every step, no hazard, token_mult_prob_error in [1, 1.05)."""
    _not_known(case)
    P.refit_equals_reference(case, schedule)


@P.fuzz(cost=10)
@given(case=P.refit_cases(max_world=MAX_WORLD, faults=FAULTS), schedule=P.run_schedules())
def test_refit_is_deterministic(case, schedule):
    """The same case and schedule twice: the same digest (trace, hazards, values)."""
    P.refit_deterministic(case, schedule)


@P.fuzz(cost=10)
@given(case=P.refit_cases(max_world=MAX_WORLD, faults=P.fault_sets()), schedule=P.run_schedules())
def test_hazard_free_refits_are_schedule_free(case, schedule):
    """Over fault sets: a run without a hazard computes what the quiet schedule computes, so a schedule damages
    values only through a reported hazard (the detector's promise, checked on the whole stack)."""
    P.schedule_free_without_hazards(case, schedule)


@P.fuzz(cost=2)
@given(case=P.kernel_cases(max_world=MAX_WORLD, drop=DROP), schedule=P.run_schedules())
def test_incident_kernel_matches_reference(case, schedule):
    """The incident's dequantize-then-gather kernel with its sync, over block shapes (128x128, 1x128, 1x32,
    per-tensor), uneven shard shapes, 1-8 ranks and both NCCL profiles: bit-exact and no hazard."""
    P.kernel_matches_reference(case, schedule)


@P.fuzz(cost=2)
@given(case=P.kernel_cases(max_world=MAX_WORLD), schedule=P.run_schedules())
def test_each_dropped_sync_is_reported(case, schedule):
    """The detector on mutants: with its sync dropped, the kernel reports a hazard wherever the pair the sync
    ordered exists: everywhere for wait_stream / wait_event / synchronize / work.wait; for record_stream only when
    a later weight can reuse the freed block and the gather does not record its input itself (NCCL 2.7 does)."""
    P.dropped_sync_is_reported(case, schedule)


def test_known_findings_still_reproduce():
    """Each known finding's shrunk example still fails (hazard reported): once the stack is fixed, this fails and
    the finding's region must leave KNOWN_FINDINGS, so the campaign fuzzes it again."""
    for name, (region, example) in KNOWN_FINDINGS.items():
        assert region(example), name
        res = P.run_refit(example)
        assert res.hazards, f"{name} no longer reproduces ({res.replay}): remove it from KNOWN_FINDINGS"
