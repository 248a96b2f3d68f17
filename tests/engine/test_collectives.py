"""Collective semantics in the engine (simdist/engine/collectives.py): rendezvous by (group, sequence number),
matching of signatures (TORCH_DISTRIBUTED_DEBUG=DETAIL), timing (the data moves once the last rank has started;
the collective ends at the latest start plus its cost), the cross-rank happens-before join, reductions in rank
order, and a Deadlock when some rank's side can never run."""
import pytest
import torch

from simdist.engine.collectives import launch_collective, reduce_values
from simdist.engine.errors import CollectiveMismatch, Deadlock
from simdist.engine.world import World


def _sum_f32(vals, metas):
    """compute(): every rank's single input viewed as float32, summed in rank order, written to every rank."""
    total = reduce_values([v[0].view(torch.float32) for v in vals], "SUM")
    return [[total.view(torch.uint8)] for _ in vals]


def _world(make_sim, n=2):
    sim = make_sim(n)
    for r in sim.ranks:
        r.collectives.eager_init = True  # communicators made at init (no host rendezvous at first use)
    return sim


def _all_reduce(sim, i, region, sig=("all_reduce", "f32[4]", "SUM"), stream=None, async_op=False):
    rank = sim.rank(i)
    g = rank.collectives.world_group
    op, *_ = launch_collective(rank, g, "all_reduce", "all_reduce(f32[4])", sig, [region], [region], _sum_f32,
                               async_op, 16)
    return op


def test_all_reduce_values_and_timing(make_sim):
    sim = _world(make_sim)
    xs = []
    for i in range(2):
        s = sim.stream(i)
        x = sim.region(sim.malloc(16, s))
        xs.append(x)
        sim.kernel(s, writes=[x], fn=(lambda v=x._inner, i=i: v.view(torch.float32).fill_(i + 1)),
                   dur=10 if i == 0 else 200_000)
    ops = [_all_reduce(sim, i, xs[i]) for i in range(2)]
    sim.deliver()
    sim.run_all()
    for x in xs:
        assert x._inner.view(torch.float32).tolist() == [3.0] * 4
    assert ops[0].end == ops[1].end  # one collective, one end
    assert ops[0].end > max(o.start for o in ops)  # ... after the last rank started it


def test_a_collective_joins_the_participants_clocks(make_sim):
    sim = _world(make_sim)
    regions = [sim.region(sim.malloc(16, sim.stream(i))) for i in range(2)]
    before = sim.kernel(sim.stream(1), writes=[regions[1]])  # rank 1, before its side of the collective
    for i in range(2):
        _all_reduce(sim, i, regions[i])
    after = sim.kernel(sim.stream(0))  # rank 0, after its side
    sim.run_all()
    assert sim.ordered(before, after)


def test_mismatched_signatures_name_both_ranks(make_sim):
    sim = _world(make_sim)
    regions = [sim.region(sim.malloc(16, sim.stream(i))) for i in range(2)]
    _all_reduce(sim, 0, regions[0], sig=("all_reduce", "f32[4]", "SUM"))
    sim.deliver()
    with pytest.raises(CollectiveMismatch, match="rank 0.*\n(.*\n)*.*rank 1"):
        _all_reduce(sim, 1, regions[1], sig=("all_reduce", "f32[4]", "MAX"))


def test_a_cycle_of_collectives_across_streams_is_a_deadlock(make_sim):
    sim = _world(make_sim)
    groups = [[r.collectives.new_group([0, 1]) for _ in range(2)] for r in sim.ranks]
    regions = [sim.region(sim.malloc(16, sim.stream(i))) for i in range(2)]
    order = {0: (0, 1), 1: (1, 0)}  # rank 1 issues them the other way round, on one stream
    for i in range(2):
        for k in order[i]:
            launch_collective(sim.rank(i), groups[i][k], "all_reduce", "all_reduce", ("ar",), [regions[i]],
                              [regions[i]], _sum_f32, False, 16)
    sim.run_all()  # every queued op that can run has run
    with pytest.raises(Deadlock, match="queued on its stream behind work that can never start"):
        World.check_finished([line for r in sim.ranks for line in r.collectives.pending_lines()])


def test_a_collective_some_rank_never_joins_is_a_deadlock(make_sim):
    sim = _world(make_sim)
    region = sim.region(sim.malloc(16, sim.stream(0)))
    _all_reduce(sim, 0, region)
    sim.run_all()
    with pytest.raises(Deadlock, match=r"joined by ranks \[0\], never by ranks \[1\]"):
        World.check_finished([line for r in sim.ranks for line in r.collectives.pending_lines()])


@pytest.mark.parametrize("op, expected", [("SUM", [6, 9]), ("MAX", [5, 5]), ("MIN", [1, 4]), ("PRODUCT", [5, 20]),
                                          ("PREMUL_SUM(0.5)", [3, 4.5])])
def test_reductions_in_rank_order(op, expected):
    vals = [torch.tensor([1.0, 4.0]), torch.tensor([5.0, 5.0])]
    assert reduce_values(vals, op).tolist() == expected
