"""Hypothesis strategies for simulated-distributed tests; all compose with @given and shrink.

Shrinking goes toward small worlds, small models, no faults and quiet schedules (all delays 0), so a failing
example ends as the smallest configuration and the fewest non-zero delays that still fail.
"""
from __future__ import annotations

from hypothesis import strategies as st

import simdist

RECIPES = ("bf16", "per-tensor", "blockwise-pow2", "blockwise-fp32", "mxfp8")
BLOCK_SHAPES = ((128, 128), (1, 128), (1, 32))


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


@st.composite
def parallel_degrees(draw, max_world=8, allow_ep=True):
    """dict(tp, pp, ep, dp) with tp*pp*dp <= max_world; ep divides dp*tp (Megatron's expert layout)."""
    tp = draw(st.sampled_from([d for d in (1, 2, 4, 8) if d <= max_world]))
    pp = draw(st.sampled_from([d for d in (1, 2, 4) if tp * d <= max_world]))
    dp = draw(st.sampled_from([d for d in (1, 2, 4) if tp * pp * d <= max_world]))
    eps = [d for d in (1, 2, 4) if (tp * dp) % d == 0] if allow_ep else [1]
    ep = draw(st.sampled_from(eps))
    return {"tp": tp, "pp": pp, "ep": ep, "dp": dp}


@st.composite
def model_shapes(draw, tp=1, pp=1, ep=1, block=128, moe=None):
    """A tiny Llama-like shape whose every TP shard is whole block x block FP8 tiles.

    Query groups are a multiple of TP and kv_channels is the block size, so QKV, output-projection and MLP shards
    stay tile-aligned; hidden, FFN and vocab are multiples of block x TP. Shrinks toward the smallest model.
    """
    groups = tp * draw(st.sampled_from([1, 2]))
    heads = groups * draw(st.sampled_from([1, 2, 4]))
    k = draw(st.sampled_from([1, 2]))
    experts = ep * draw(st.sampled_from([1, 2])) if (draw(st.booleans()) if moe is None else moe) else None
    return {"hidden_size": block * tp * k, "num_attention_heads": heads, "num_query_groups": groups,
            "kv_channels": max(block, 64), "ffn_hidden_size": block * tp * draw(st.sampled_from([1, 2])),
            "num_layers": pp * draw(st.sampled_from([1, 2])), "vocab_size": block * tp * draw(st.sampled_from([1, 2])),
            "num_moe_experts": experts}


def fault_sets(faults, max_size=2):
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
