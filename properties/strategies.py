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
    """A tiny Llama-like shape, every sharded dimension a multiple of the block (so FP8 tiles align)."""
    groups = draw(st.sampled_from([g for g in (1, 2, 4, 8) if g % tp == 0 or tp % g == 0 and g >= tp] or [tp]))
    groups = max(groups, tp)
    heads_per_group = draw(st.sampled_from([1, 2, 4]))
    kv_channels = draw(st.sampled_from([64, 128]))
    heads = groups * heads_per_group
    hidden = draw(st.sampled_from([block * k for k in (1, 2, 4) if (block * k) % tp == 0])) if block > 1 else 256
    hidden = max(hidden, heads * kv_channels // max(1, heads_per_group * 2) // block * block or block)
    ffn = draw(st.sampled_from([block * tp * k for k in (1, 2)]))
    layers = draw(st.sampled_from([pp * k for k in (1, 2)]))
    vocab = draw(st.sampled_from([block * tp * k for k in (1, 2)]))
    use_moe = draw(st.booleans()) if moe is None else moe
    experts = draw(st.sampled_from([ep * k for k in (1, 2)])) if use_moe else None
    return {"hidden_size": hidden, "num_attention_heads": heads, "num_query_groups": groups,
            "kv_channels": kv_channels, "ffn_hidden_size": ffn, "num_layers": layers, "vocab_size": vocab,
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
