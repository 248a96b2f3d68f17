"""Properties and strategies: shrinking a planted race, and the detector's soundness on mutants."""
import pytest
import torch
import torch.distributed as dist
from hypothesis import find, given
from hypothesis import strategies as st

import simdist.properties as P
import simdist


def planted(world_size_gate=2):
    """A user function whose race exists only with >= 2 ranks (like the incident's TP >= 2)."""
    def fn():
        x = torch.arange(4096, dtype=torch.float32, device="cuda")
        if dist.get_world_size() >= world_size_gate:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                y = x * 2            # produced on a side stream ...
        else:
            y = x * 2
        out = torch.empty(4096 * dist.get_world_size(), device="cuda")
        dist.all_gather_into_tensor(out, y)  # ... gathered without a wait
        return out
    return fn


def test_planted_race_shrinks_to_two_ranks_and_few_delays():
    fn = planted()

    def damaged(example):
        ws, policy = example
        res = simdist.run(fn, world_size=ws, policy=policy)
        return any(h.observed for h in res.hazards)

    # the budget is the profile's (ci: 20 examples, derandomized); the race shows within a few
    ws, policy = find(st.tuples(P.world_sizes(1, 4), P.schedules(max_len=12)), damaged, settings=P.budget(cost=1))
    assert ws == 2
    assert sum(1 for d in policy.choices if d) <= 2
    # the shrunk schedule replays to the same digest
    assert simdist.run(fn, world_size=ws, policy=policy).digest == simdist.run(
        fn, world_size=ws, policy=simdist.Choice(list(policy.choices))).digest


@P.fuzz(cost=1)
@given(ws=P.world_sizes(1, 4), policy=P.any_schedule())
def test_fixed_program_is_clean_under_any_schedule(ws, policy):
    def fn():
        x = torch.arange(4096, dtype=torch.float32, device="cuda")
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            y = x * 2
        torch.cuda.current_stream().wait_stream(side)
        y.record_stream(torch.cuda.current_stream())
        out = torch.empty(4096 * dist.get_world_size(), device="cuda")
        dist.all_gather_into_tensor(out, y)
        return out
    P.no_hazards(fn, world_size=ws, policy=policy)
    P.values_unaffected(fn, world_size=ws, policy=policy)


def test_deterministic_property():
    P.deterministic(planted(), world_size=2, seed=4)


@P.fuzz(cost=1)
@given(deg=P.parallel_degrees(max_world=8), recipe=P.recipes(), block=P.block_shapes(), prof=P.nccl_profiles())
def test_strategies_draw_valid_configs(deg, recipe, block, prof):
    from simdist.properties import campaign
    campaign.record("strategies_draw_valid_configs", dict(deg, recipe=recipe, block=block, nccl=prof), None, True)
    assert deg["tp"] * deg["pp"] * deg["dp"] <= 8 and deg["dp"] % deg["ep"] == 0
    assert recipe in P.strategies.RECIPES and block in P.strategies.BLOCK_SHAPES and prof in ("2.7", "2.8")


# --- detector soundness: remove each sync from correct programs --------------------------------
SYNCS = ("wait_stream", "wait_event", "record_stream", "work.wait", "synchronize")


def program(kind, drop=None):
    """Correct programs, each ordered by one sync; `drop` removes it (the mutant)."""
    def fn():
        cur = torch.cuda.current_stream()
        side = torch.cuda.Stream()
        x = torch.arange(65536, dtype=torch.float32, device="cuda")
        side.wait_stream(cur)
        if kind == "wait_stream":
            with torch.cuda.stream(side):
                y = x * 3
            if drop != "wait_stream":
                cur.wait_stream(side)
            return (y + 1).sum().item()
        if kind == "wait_event":
            with torch.cuda.stream(side):
                y = x * 3
                ev = torch.cuda.Event()
                ev.record()
            if drop != "wait_event":
                cur.wait_event(ev)
            return (y + 1).sum().item()
        if kind == "record_stream":
            with torch.cuda.stream(side):
                torch.cuda._sleep(100_000)
                z = x * 2
            if drop != "record_stream":
                x.record_stream(side)
            del x
            w = torch.ones(65536, device="cuda")  # would reuse x's block on the current stream
            cur.wait_stream(side)
            return (z + w).sum().item()
        if kind == "work.wait":
            out = torch.empty(65536 * dist.get_world_size(), device="cuda")
            work = dist.all_gather_into_tensor(out, x, async_op=True)
            if drop != "work.wait":
                work.wait()
            return out.sum().item()
        if kind == "synchronize":
            with torch.cuda.stream(side):
                y = x * 3
            if drop != "synchronize":
                torch.cuda.synchronize()
            return y.cpu()
    return fn


@pytest.mark.parametrize("nccl", ["2.7", "2.8"])
@pytest.mark.parametrize("kind", SYNCS)
def test_mutation_suite(kind, nccl):
    for seed in range(5):
        assert not simdist.run(program(kind), world_size=2, seed=seed, nccl=nccl).hazards, (kind, "original")
        assert simdist.run(program(kind, drop=kind), world_size=2, seed=seed, nccl=nccl).hazards, (kind, "mutant")


def test_pytest_plugin_fixture(simdist_run):
    res = simdist_run(planted(), world_size=2)
    assert res.hazards and res.world_size == 2


@P.fuzz(cost=5)
@given(data=st.data())
def test_model_shapes_compose_with_the_fakes(data):
    """Drawn shapes are valid Megatron configs at the drawn parallel degrees, and the refit property holds."""
    from simdist.fakes.megatron_core import TransformerConfig
    tp = data.draw(st.sampled_from([1, 2]))
    recipe = data.draw(st.sampled_from(["bf16", "blockwise-fp32"]))
    shape = data.draw(P.model_shapes(tp=tp, pp=1, ep=1, moe=False, recipe=recipe))
    TransformerConfig(**shape, fp8_recipe=recipe, fp8_param=recipe != "bf16", tensor_model_parallel_size=tp)
    case = {"tp": tp, "pp": 1, "dp": 1, "ep": 1, "recipe": recipe, "fp8_param": recipe != "bf16", "shape": shape,
            "steps": 1, "refit": "colocated", "overlap_param_gather": True, "group_bytes": 1 << 20, "nccl": "2.8",
            "faults": []}
    P.refit_equals_reference(case, data.draw(P.choice_schedules()))
