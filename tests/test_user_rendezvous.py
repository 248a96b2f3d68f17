"""A program's own rendezvous (torch/distributed/rendezvous.py): Megatron-Core's unit tests (tests/unit_tests/
test_utilities.py `Utils.initialize_distributed`, core_v0.16.1) bind `from torch.distributed import rendezvous` at
import, call `rendezvous("tcp://localhost:6000", rank, world_size)` and give the store to `init_process_group`.
Every spelling of it reaches the module's `_rendezvous_helper`, which simdist swaps for a store of the rank's own
(ranks meet in the engine; a real TCPStore master would wait for peers while its rank holds the turn: before this,
the run timed out after 60 s with DistStoreError). A direct `_create_c10d_store` is refused by name."""
import os
import textwrap

import pytest
import torch
import torch.distributed as dist
from torch.distributed import rendezvous  # bound before any run, as the Megatron tests do

import simdist
from simdist.errors import UnsupportedOperation

SCRIPT = textwrap.dedent("""
    import os
    from datetime import timedelta
    import torch
    import torch.distributed as dist
    from torch._C._distributed_c10d import PrefixStore
    from torch.distributed import rendezvous

    rank, world = int(os.environ["LOCAL_RANK"]), int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(rank % torch.cuda.device_count())
    it = rendezvous("tcp://localhost:6000", rank, world, timeout=timedelta(minutes=1))
    store, r, w = next(it)
    store.set_timeout(timedelta(minutes=1))
    dist.init_process_group(backend="nccl", world_size=world, rank=rank, store=PrefixStore("default_pg", store))
    dist.barrier()
    t = torch.full((4,), float(rank + 1), device="cuda")
    dist.all_reduce(t)
    assert (r, w) == (rank, world)
    assert t.tolist() == [float(sum(range(1, world + 1)))] * 4, t
    dist.destroy_process_group()
""")


@pytest.mark.parametrize("transport", ["processes", "threads"])
def test_a_programs_tcp_rendezvous_store_goes_to_init_process_group(tmp_path, transport):
    p = tmp_path / "megatron_utils_style.py"
    p.write_text(SCRIPT)
    res = simdist.run_script(str(p), world_size=2, seed=0, transport=transport)
    assert not res.hazards


def _bound_before_the_run():
    store, rank, world = next(rendezvous("env://"))  # the function bound at this module's import
    dist.init_process_group("nccl", store=store, rank=rank, world_size=world)
    t = torch.ones(2, device="cuda")
    dist.all_reduce(t)
    return rank, world, t.tolist()


def test_the_rendezvous_bound_before_the_run_gives_each_rank_its_place():
    res = simdist.run(_bound_before_the_run, world_size=2)
    assert res.returns == [(0, 2, [2.0, 2.0]), (1, 2, [2.0, 2.0])]


def _wrong_world():
    next(rendezvous("tcp://localhost:6000", 0, 3))


def test_a_rendezvous_for_another_world_size_is_named():
    with pytest.raises(ValueError, match="world_size=3.*2 ranks"):
        simdist.run(_wrong_world, world_size=2)


def _direct_store():
    import importlib
    importlib.import_module("torch.distributed.rendezvous")._create_c10d_store("localhost", 6000, 0, 2, None)


def test_a_direct_tcp_store_is_refused_by_name():
    with pytest.raises(UnsupportedOperation, match="real c10d TCP store"):
        simdist.run(_direct_store, world_size=2)


STORE_SCRIPT = textwrap.dedent("""
    import os
    import torch
    import torch.distributed as dist
    from torch.distributed import rendezvous

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(rank)
    store, _, _ = next(rendezvous("tcp://localhost:6000", rank, world))
    dist.init_process_group("nccl", store=store, rank=rank, world_size=world)
    count = store.add("joined", 1)
    if rank == 0:
        store.set("plan", "tp2")
    dist.barrier()  # rank 0 set the key before any rank passes the barrier
    plan = store.get("plan").decode()
    out = os.environ["OUT"]
    open(f"{out}.{rank}", "w").write(f"{count} {plan} {dist.is_initialized()}")
    dist.destroy_process_group()
""")


@pytest.mark.parametrize("transport", ["processes", "threads"])
def test_the_programs_store_is_shared_by_the_ranks(tmp_path, transport, monkeypatch):
    # every rank of a real job reaches the one TCPStore: add() counts 1 and 2, a key rank 0 set is read by rank 1
    # (a store of each rank's own gave 1 on both ranks and blocked rank 1's get)
    p = tmp_path / "store.py"
    p.write_text(STORE_SCRIPT)
    monkeypatch.setenv("OUT", str(tmp_path / "out"))
    res = simdist.run_script(str(p), world_size=2, seed=0, transport=transport)
    assert not res.hazards
    got = sorted((tmp_path / f"out.{r}").read_text() for r in range(2))
    assert got == ["1 tp2 True", "2 tp2 True"]


def _sets_env():
    os.environ["SIMDIST_TEST_PROGRAM_VAR"] = "1"
    os.environ.pop("SIMDIST_TEST_CALLER_VAR", None)
    return os.environ.get("SIMDIST_TEST_PROGRAM_VAR")


def test_a_programs_environment_changes_do_not_outlast_the_run(monkeypatch):
    # a rank process's environment is its own; rank threads write the caller's (where C++ getenv sees it), and
    # the run puts it back as it was (corpus c08 set PYTORCH_NO_CUDA_MEMORY_CACHING for every later run)
    monkeypatch.setenv("SIMDIST_TEST_CALLER_VAR", "kept")
    monkeypatch.delenv("SIMDIST_TEST_PROGRAM_VAR", raising=False)
    assert simdist.run(_sets_env, world_size=2).returns == ["1", "1"]
    assert "SIMDIST_TEST_PROGRAM_VAR" not in os.environ
    assert os.environ["SIMDIST_TEST_CALLER_VAR"] == "kept"
