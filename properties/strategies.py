"""Hypothesis strategies for simulated-distributed tests; all compose with @given and shrink.

Shrinking goes toward small worlds, small models, no faults and quiet schedules (no extra delay), so a failing
example ends as the smallest configuration and the fewest non-zero delays that still fail.

Two layers:

- building blocks (`world_sizes`, `parallel_degrees`, `model_shapes`, `recipes`, `block_shapes`, `nccl_profiles`,
  `fault_sets`, `schedules`, `pct_schedules`, `jitter_seeds`, `any_schedule`) for users' own properties;
- whole spaces for the refit stack's fakes: `refit_cases()` (TP / PP / EP / DP, recipe, FP8 params, uneven and
  MoE model shapes, steps, refit mode, NCCL profile, planted faults) and `kernel_cases()` (the incident's
  dequantize-then-gather kernel over block shapes, shapes, world sizes and its syncs), with `run_schedules()`
  (choice, PCT, jitter) as `Schedule` values whose `run_kwargs()` give `simdist.run` a seed and policy whose
  `RunResult.replay` command reproduces the run.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

from hypothesis import strategies as st

import simdist

RECIPES = ("bf16", "per-tensor", "blockwise-pow2", "blockwise-fp32", "mxfp8")
BLOCK_SHAPES = ((128, 128), (1, 128), (1, 32))
#: the syncs of the incident kernel (`simdist.properties.campaign.incident_kernel`); each one orders one pair
SYNCS = ("wait_stream", "wait_event", "record_stream", "work.wait", "synchronize")
#: NeMo-RL's refit paths in the fakes (`grpo_refit_loop(refit=...)`): CUDA-IPC colocated, one broadcast per weight,
#: and the packed broadcast over side streams (nemo_rl/utils/packed_tensor.py)
REFIT_MODES = ("colocated", "broadcast", "packed-broadcast")


def world_sizes(min_size=1, max_size=8):
    return st.integers(min_size, max_size)


def nccl_profiles():
    return st.sampled_from(["2.8", "2.7"])


def recipes():
    return st.sampled_from(RECIPES)


def block_shapes():
    return st.sampled_from(BLOCK_SHAPES)


def fp8_params():
    return st.booleans()


def _at_most(options, limit):
    """The largest option <= limit (options include 1)."""
    return max(o for o in options if o <= limit)


@st.composite
def parallel_degrees(draw, max_world=8, allow_ep=True):
    """dict(tp, pp, ep, dp) with tp*pp*dp <= max_world; ep divides dp (Megatron's expert layout with the expert
    TP size equal to TP: the world must split into expert-TP x EP x expert-DP x PP).

    Every degree is drawn, always, from the same list and then capped to what the world allows, so the number
    of choices never depends on earlier values: the shrinker can lower TP without misaligning what follows.
    1 and 2 come twice: small worlds (cheap, and the incident's TP=2) are drawn more often than 8-rank ones."""
    tp = _at_most((1, 2, 4, 8), min(max_world, draw(st.sampled_from((1, 2, 2, 4, 8)))))
    pp = _at_most((1, 2, 4), min(max_world // tp, draw(st.sampled_from((1, 1, 2, 4)))))
    dp = _at_most((1, 2, 4), min(max_world // (tp * pp), draw(st.sampled_from((1, 1, 2, 4)))))
    ep = draw(st.sampled_from((1, 2, 4)))
    ep = _at_most([d for d in (1, 2, 4) if dp % d == 0], ep) if allow_ep else 1
    return {"tp": tp, "pp": pp, "ep": ep, "dp": dp}


def alignment(recipe=None, fp8_param=True):
    """The unit every sharded dimension must be a multiple of: 128 for blockwise FP8 params (whole 128x128 tiles
    per TP shard), 32 for MXFP8 params (1x32 blocks), else 8 (bf16 / per-tensor: any even size; 8 keeps the
    model tiny and the rotary embedding's head size even)."""
    if not fp8_param or recipe in (None, "bf16", "per-tensor"):
        return 8
    return 128 if recipe.startswith("blockwise") else 32


@st.composite
def model_shapes(draw, tp=1, pp=1, ep=1, block=128, moe=None, recipe=None, fp8_param=True):
    """A tiny Llama-like (or Qwen-MoE-like) shape valid at these parallel degrees.

    Every TP shard of an FP8 weight is whole blocks of the recipe (`alignment`; `block` when no recipe is
    given); hidden, FFN and vocab sizes are uneven multiples (1x, 2x or 3x) of that unit, independent of each
    other and of heads x head size. Query groups are a multiple of TP, experts of EP. Shrinks toward the smallest.
    """
    u = alignment(recipe, fp8_param) if recipe is not None else block
    g, r, c, is_moe, e, h, f, layers, v = (
        draw(st.sampled_from([1, 2])), draw(st.sampled_from([1, 2, 3])), draw(st.sampled_from([1, 2])),
        draw(st.booleans()), draw(st.sampled_from([1, 2])), draw(st.sampled_from([1, 2, 3])),
        draw(st.sampled_from([1, 2, 3])), draw(st.sampled_from([1, 2])), draw(st.sampled_from([2, 3, 5])))
    # every value is drawn whatever the others are (a stable number of choices shrinks well), then capped to keep
    # large worlds cheap: one query group per TP rank from TP=4, two heads per group beyond 2 groups, one layer per
    # stage at PP=4
    groups = tp * (g if tp <= 2 else 1)
    heads = groups * (r if groups <= 2 else min(r, 2))
    is_moe = is_moe if moe is None else moe
    experts = ep * e if is_moe else None
    shape = {"hidden_size": u * h,  # u is a multiple of every TP size (<= 8)
             "num_attention_heads": heads, "num_query_groups": groups, "kv_channels": 128 if u >= 128 else u * c,
             "ffn_hidden_size": u * tp * f, "num_layers": pp * (layers if pp <= 2 else 1), "vocab_size": 8 * tp * v,
             "num_moe_experts": experts}
    if experts is not None:
        shape["moe_router_topk"] = min(2, experts)
    return shape


def fault_sets(faults=None, max_size=2):
    """Sets of the fakes' fault switches (default: `simdist.fakes.megatron_core.FAULTS`, read when drawn)."""
    if faults is None:
        from simdist.fakes.megatron_core import FAULTS
        faults = FAULTS
    return st.frozensets(st.sampled_from(sorted(faults)), max_size=max_size)


def schedules(max_len=24, max_delay=8):
    """Delays (in 50 us units) for the first ops, read by the choice-driven policy; shrinks to all zeros."""
    return st.lists(st.integers(0, max_delay), max_size=max_len).map(simdist.Choice)


def pct_schedules(depth=(1, 3)):
    """PCT as an alternative: a seed and a bug depth; reports its hit-probability bound."""
    return st.builds(simdist.PCT, seed=st.integers(0, 2**32 - 1), depth=st.integers(*depth))


def jitter_seeds():
    return st.integers(0, 2**32 - 1).map(simdist.Jitter)


def any_schedule():
    return st.one_of(schedules(), pct_schedules(), jitter_seeds())


# ---------------------------------------------------------------------------------------------- replayable schedules
@dataclass(frozen=True)
class Schedule:
    """A schedule as data: `choice` (extra delays, in 50 us units, by op index in launch order; none = the cost
    model alone), `pct` (seed, depth) or `jitter` (seed). `run_kwargs()` gives `simdist.run` the seed and policy
    whose `RunResult.replay` names the same schedule (`--delays`, `--policy pct --seed`, `--seed`)."""

    kind: str = "choice"
    delays: Tuple[Tuple[int, int], ...] = ()
    seed: int = 0
    depth: int = 2

    def run_kwargs(self) -> dict:
        if self.kind == "jitter":
            return {"seed": self.seed, "policy": None}
        if self.kind == "pct":
            # policy "pct" is PCT(seed, depth=2), the form `simdist run --policy pct --seed S` rebuilds
            return {"seed": self.seed, "policy": "pct" if self.depth == 2 else simdist.PCT(self.seed, self.depth)}
        return {"seed": 0, "policy": simdist.Choice(self.delay_list())}

    def delay_list(self):
        d = dict(self.delays)
        return [d.get(i, 0) for i in range(max(d) + 1)] if d else []

    @property
    def nonzero_delays(self) -> Optional[int]:
        """Non-zero extra delays of a choice schedule; None for PCT and jitter (every op is perturbed)."""
        return sum(1 for _, v in self.delays if v) if self.kind == "choice" else None

    def to_json(self) -> dict:
        if self.kind == "choice":
            return {"kind": "choice", "delays": {str(i): v for i, v in self.delays}}
        if self.kind == "pct":
            return {"kind": "pct", "seed": self.seed, "depth": self.depth}
        return {"kind": "jitter", "seed": self.seed}

    def __str__(self):
        if self.kind == "choice":
            return ("choice(" + ", ".join(f"op {i}: +{v * 50} us" for i, v in self.delays) + ")"
                    if self.delays else "choice(no extra delay)")
        if self.kind == "pct":
            return f"pct(seed={self.seed}, depth={self.depth})"
        return f"jitter(seed={self.seed})"


def choice_schedules(max_delays=3, max_op=4095, max_delay=8):
    """A few extra delays at op indices (launch order over all ranks); shrinks to fewer, earlier, smaller ones and
    finally to none. Sparse, so a delay can land on the op that matters in a program of thousands of ops."""
    # half the indices among the first 128 ops (a small program has no more), half anywhere up to max_op
    ops = st.one_of(st.integers(0, min(127, max_op)), st.integers(0, max_op))
    return st.dictionaries(ops, st.integers(1, max_delay), max_size=max_delays).map(
        lambda d: Schedule("choice", tuple(sorted(d.items()))))


def run_schedules(max_delays=3, max_op=4095, pct_depth=(1, 3)):
    """Choice first (what shrinking goes to), then PCT and seeded jitter."""
    seeds = st.integers(0, 2**32 - 1)
    return st.one_of(choice_schedules(max_delays, max_op),
                     st.builds(lambda s, d: Schedule("pct", seed=s, depth=d), seeds, st.integers(*pct_depth)),
                     seeds.map(lambda s: Schedule("jitter", seed=s)))


# ---------------------------------------------------------------------------------------------- whole spaces
@st.composite
def refit_cases(draw, max_world=8, faults=frozenset(), steps=(1, 3), moe=None):
    """One configuration of the fakes' GRPO refit loop (keyword arguments of `simdist.properties.campaign.refit_case`,
    JSON-safe): parallel degrees (TP, PP, DP, EP for MoE), recipe and FP8 params, an uneven or MoE model shape
    aligned to the recipe's blocks, steps (the incident shows from step 2), refit mode (colocated IPC, broadcast
    or packed broadcast), the DP param all-gather overlap (at the next forward, or with the optimizer step), the
    colocated refit's group size, the NCCL profile and the fault set:
    a set (planted, as given) or a strategy (drawn)."""
    deg = draw(parallel_degrees(max_world))
    is_moe = draw(st.booleans())
    is_moe = is_moe if moe is None else moe
    ep = deg["ep"] if is_moe else 1
    recipe = draw(recipes())
    fp8 = draw(st.booleans()) and recipe != "bf16"
    shape = draw(model_shapes(tp=deg["tp"], pp=deg["pp"], ep=ep, moe=is_moe, recipe=recipe, fp8_param=fp8))
    fs = draw(faults) if isinstance(faults, st.SearchStrategy) else frozenset(faults)
    return {"tp": deg["tp"], "pp": deg["pp"], "dp": deg["dp"], "ep": ep, "recipe": recipe, "fp8_param": fp8,
            "shape": shape, "steps": draw(st.integers(*steps)),
            "refit": draw(st.sampled_from(REFIT_MODES)),
            "overlap_param_gather": draw(st.sampled_from([True, False])),
            "overlap_param_gather_with_optimizer_step": draw(st.booleans()),
            "group_bytes": draw(st.sampled_from([1 << 20, 1 << 14])),
            "nccl": draw(nccl_profiles()), "faults": sorted(fs)}


KERNEL_RECIPES = (("blockwise-fp32", (128, 128)), ("blockwise-pow2", (128, 128)), ("blockwise-fp32", (1, 128)),
                  ("blockwise-pow2", (1, 128)), ("mxfp8", (1, 32)), ("per-tensor", None))


@st.composite
def kernel_cases(draw, max_world=8, drop=None, syncs=SYNCS):
    """The incident's kernel (`simdist.properties.campaign.incident_kernel`): FP8 weight shards of a block shape
    (128x128 or 1x128 blockwise, pow2 or FP32 scales; 1x32 MXFP8; per-tensor) dequantized and TP-gathered,
    ordered by one of its syncs (`drop` removes it: the mutant). Shards are uneven multiples of the block."""
    recipe, block = draw(st.sampled_from(KERNEL_RECIPES))
    row_unit = 128 if block == (128, 128) else 32       # MXFP8 needs both dims in 32s; 1x128 only the columns
    col_unit = 128 if block is not None and block[1] == 128 else 32
    sync = draw(st.sampled_from(syncs))
    return {"world": draw(st.integers(1, max_world)), "sync": sync, "drop": drop == sync, "recipe": recipe,
            "block": list(block) if block else None, "rows": row_unit * draw(st.sampled_from([1, 2, 3])),
            "cols": col_unit * draw(st.sampled_from([1, 2, 3])), "weights": draw(st.integers(1, 3)),
            "nccl": draw(nccl_profiles())}
