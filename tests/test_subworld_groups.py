"""A process group a program makes over a rendezvous of its own, after init_process_group (f-series f1).

OpenRLHF (openrlhf/utils/distributed_util.py `init_process_group`), SGLang (`init_custom_process_group`) and
open-instruct copy c10d's init_process_group to make a second "main" group of the trainer's rank 0 and the
inference workers: `rendezvous("tcp://...", rank_offset + tp_rank, 1 + tp)`, `PrefixStore(group_name, store)`,
`_new_process_group_helper(world_size, rank, [], backend, store, group_name=...)`, then
`_world.pg_group_ranks[pg] = {i: i for i in range(world_size)}`. The group numbers its ranks itself; on a GPU NCCL
learns which processes they are from the store (ncclCommInitRank after the unique-id exchange), and no collective
reads the `{i: i}` entry. simdist refused the rendezvous (a plain ValueError: "the simulated world has N ranks")
unless the group's numbering was the global one.
"""
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
from torch.distributed.distributed_c10d import Backend, PrefixStore, _new_process_group_helper, _world, rendezvous

import simdist


def _group(url, world_size, rank, name):
    store, rank, world_size = next(rendezvous(url, rank, world_size, timeout=timedelta(seconds=30)))
    store = PrefixStore(name, store)
    pg, _ = _new_process_group_helper(world_size, rank, [], Backend("nccl"), store, group_name=name,
                                      backend_options=None, timeout=timedelta(seconds=30))
    _world.pg_group_ranks[pg] = {i: i for i in range(world_size)}
    return pg


# global rank -> group rank: global ranks 3, 0 and 2 are the group's ranks 0, 1 and 2; rank 1 is no member
NUMBERING = {3: 0, 0: 1, 2: 2}


def _permuted(numbering=NUMBERING):
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    out = {}
    if rank in numbering:
        pg = _group("tcp://127.0.0.1:29800", len(numbering), numbering[rank], "update")
        t = torch.full((4,), float(10 * rank + 1), device="cuda")
        dist.broadcast(t, 0, group=pg)                 # group rank 0 is global rank 3
        out["bcast"] = t.cpu()
        u = torch.full((2,), float(rank + 1), device="cuda")
        dist.all_reduce(u, group=pg)
        out["sum"] = u.cpu()
        g = [torch.empty(1, device="cuda") for _ in range(len(numbering))]
        dist.all_gather(g, torch.tensor([float(rank)], device="cuda"), group=pg)
        out["gather"] = torch.cat(g).cpu()
    dist.barrier()
    return out


@pytest.mark.parametrize("transport", ["threads", "processes"])
def test_a_program_made_group_learns_its_members_from_its_rendezvous(transport):
    res = simdist.run(_permuted, world_size=4, seed=1, transport=transport)
    res.raise_for_hazards()
    for r in (0, 2, 3):
        got = res.returns[r]
        assert torch.equal(got["bcast"], torch.full((4,), 31.0)), (r, got)       # global rank 3's tensor
        assert torch.equal(got["sum"], torch.full((2,), 1.0 + 3.0 + 4.0)), (r, got)
        assert torch.equal(got["gather"], torch.tensor([3.0, 0.0, 2.0])), (r, got)  # in group-rank order
    assert res.returns[1] == {}
    # `_world` was bound before the run (this module's import): its writes went to the rank's registry, not to
    # c10d's module-global maps, which outlive the run and which every rank thread shares
    from torch.distributed import distributed_c10d as c10d
    assert type(c10d._world) is c10d._World and not c10d._world.pg_group_ranks and c10d._world.default_pg is None


def test_both_transports_give_the_same_digest():
    a = simdist.run(_permuted, world_size=4, seed=2, transport="threads")
    b = simdist.run(_permuted, world_size=4, seed=2, transport="processes")
    assert a.digest == b.digest


def _duplicate():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    if rank in (0, 1):
        pg = _group("tcp://127.0.0.1:29801", 2, 0, "dup")    # both claim group rank 0
        dist.all_reduce(torch.ones(1, device="cuda"), group=pg)


def test_two_members_with_one_group_rank_are_refused_by_name():
    with pytest.raises(simdist.CollectiveMismatch, match="both joined as group rank 0"):
        simdist.run(_duplicate, world_size=3)


def _missing():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    if rank in (0, 1):                                       # made for 3 ranks, 2 come
        pg = _group("tcp://127.0.0.1:29802", 3, rank, "short")
        dist.all_reduce(torch.ones(1, device="cuda"), group=pg)


def test_a_member_that_never_comes_is_a_deadlock_naming_the_group():
    with pytest.raises(simdist.Deadlock, match=r"'short'.*2 of the 3 ranks"):
        simdist.run(_missing, world_size=4)


def _too_big():
    dist.init_process_group("nccl")
    _group("tcp://127.0.0.1:29803", 5, dist.get_rank(), "big")


def test_a_rendezvous_larger_than_the_world_is_refused():
    with pytest.raises(ValueError, match="only 2 ranks"):
        simdist.run(_too_big, world_size=2)


def _default_world_mismatch():
    dist.init_process_group("nccl", init_method="tcp://127.0.0.1:29804", world_size=3, rank=dist.get_rank()
                            if dist.is_initialized() else int(__import__("os").environ.get("RANK", "0")))


def test_the_default_group_still_must_be_the_simulated_world():
    with pytest.raises(ValueError, match="simulated world has 2 ranks"):
        simdist.run(_default_world_mismatch, world_size=2)


def _tcpstore_group():
    """vLLM-StatelessProcessGroup-style: the group's own TCPStore, its master the group's rank 0 (global rank 3),
    made with the default wait_for_workers=True; the other members are clients."""
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    out = {}
    if rank in NUMBERING:
        store = dist.TCPStore("127.0.0.1", 29810, len(NUMBERING), NUMBERING[rank] == 0, timeout=timedelta(seconds=30))
        assert isinstance(store, dist.TCPStore) and store.port == 29810
        store.add("joined", 1)
        pg, _ = _new_process_group_helper(len(NUMBERING), NUMBERING[rank], [], Backend("nccl"),
                                          PrefixStore("tcp_update", store), group_name="tcp_update",
                                          backend_options=None, timeout=timedelta(seconds=30))
        _world.pg_group_ranks[pg] = {i: i for i in range(len(NUMBERING))}
        t = torch.full((4,), float(10 * rank + 1), device="cuda")
        dist.broadcast(t, 0, group=pg)
        out["bcast"] = t.cpu()
        dist.barrier(group=pg)
        out["joined"] = int(store.add("joined", 0))
    dist.barrier()
    return out


@pytest.mark.parametrize("transport", ["threads", "processes"])
def test_a_group_over_a_tcpstore_the_program_made_runs_and_learns_its_members(transport):
    """A real TCPStore made inside a rank blocked the rank holding the turn (the master waits for its workers, a
    client for its master's socket) until the store's timeout; it is now the world's program store under its
    address, and the group made over it learns its members from its first collective."""
    res = simdist.run(_tcpstore_group, world_size=4, seed=0, transport=transport)
    res.raise_for_hazards()
    for r in NUMBERING:
        assert torch.equal(res.returns[r]["bcast"], torch.full((4,), 31.0))
        assert res.returns[r]["joined"] == 3          # every member's add reached one store
    assert res.returns[1] == {}


def _race_on_rank0_crash_on_rank1():
    """Rank 0 broadcasts from a side stream that never waited for the kernel writing the tensor; rank 1 asserts
    on what it received."""
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    t = torch.empty(1 << 22, device="cuda")
    if rank == 0:
        t.fill_(1.0).mul_(3.0)                         # two kernels on the current stream, 16 MiB each
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):                  # no side.wait_stream(current_stream())
            dist.broadcast(t, 0)
        torch.cuda.current_stream().wait_stream(side)
    else:
        dist.broadcast(t, 0)
        assert bool((t == 3.0).all()), "received damaged weights"
    dist.barrier()


@pytest.mark.parametrize("transport", ["threads", "processes"])
def test_an_exception_caused_by_another_ranks_race_names_that_race(transport):
    """f-series f3: values a race damaged on rank 0 reach rank 1 through the broadcast, and rank 1's assert ends
    the run; its exception now lists rank 0's hazards too (w6's note listed only the raising rank's own)."""
    with pytest.raises(AssertionError, match="received damaged weights") as ei:
        simdist.run(_race_on_rank0_crash_on_rank1, world_size=2, seed=0, transport=transport)
    notes = "\n".join(getattr(ei.value, "__notes__", []))
    assert "rank 0 had found 1 hazard(s) before rank 1's exception" in notes, notes
    assert "read-after-write [OBSERVED: values damaged]" in notes and "nccl:broadcast" in notes, notes
