"""One test per semantic rule the engine models, each citing where the rule comes from."""
import math
import os
import subprocess
import sys
import threading
import time

import pytest
import torch
import torch.distributed as dist

import simdist
from simdist.faces import guard
from simdist import Targeted

SEEDS = range(20)


def kinds(res):
    return sorted({h.kind for h in res.hazards})


def test_stream_order_same_stream_is_ordered():
    """Rule: work on one stream runs in launch order (CUDA Programming Guide, "Streams")."""
    def fn():
        x = torch.ones(1024, device="cuda")
        y = x * 2
        x.add_(1)
        return y + x
    for seed in SEEDS:
        res = simdist.run(fn, seed=seed)
        assert not res.hazards
        assert torch.equal(res.returns[0], torch.full((1024,), 4.0))


def _side_producer(sync):
    def fn():
        cur = torch.cuda.current_stream()
        side = torch.cuda.Stream()
        x = torch.ones(4096, device="cuda")
        side.wait_stream(cur)
        with torch.cuda.stream(side):
            y = x * 3
        if sync == "wait_stream":
            cur.wait_stream(side)
        elif sync == "event_after":
            ev = torch.cuda.Event()
            ev.record(side)
            cur.wait_event(ev)
        elif sync == "synchronize":
            torch.cuda.synchronize()
        return y + 1
    return fn


def _side_producer_event_before():
    def fn():
        cur = torch.cuda.current_stream()
        side = torch.cuda.Stream()
        x = torch.ones(4096, device="cuda")
        side.wait_stream(cur)
        ev = torch.cuda.Event()
        ev.record(side)          # captures the work queued on `side` so far: nothing of the producer
        with torch.cuda.stream(side):
            y = x * 3
        cur.wait_event(ev)
        return y + 1
    return fn


@pytest.mark.parametrize("seed", SEEDS)
def test_side_stream_producer_without_sync_is_a_hazard(seed):
    """Rule: streams are unordered unless synchronized (CUDA Programming Guide, "Streams")."""
    res = simdist.run(_side_producer(None), seed=seed)
    assert kinds(res) == ["read-after-write"]


@pytest.mark.parametrize("seed", SEEDS)
def test_wait_stream_orders(seed):
    """Rule: s.wait_stream(o) makes later work on s wait for the work queued on o (torch/cuda/streams.py)."""
    assert not simdist.run(_side_producer("wait_stream"), seed=seed).hazards


@pytest.mark.parametrize("seed", SEEDS)
def test_event_recorded_after_producer_orders(seed):
    """Rule: an event captures the work queued on its stream at record time; wait_event waits for it
    (cudaEventRecord / cudaStreamWaitEvent)."""
    assert not simdist.run(_side_producer("event_after"), seed=seed).hazards


@pytest.mark.parametrize("seed", SEEDS)
def test_event_recorded_before_producer_does_not_order(seed):
    """Rule: work launched after cudaEventRecord is not captured by the event."""
    assert kinds(simdist.run(_side_producer_event_before(), seed=seed)) == ["read-after-write"]


@pytest.mark.parametrize("seed", SEEDS)
def test_synchronize_orders(seed):
    """Rule: torch.cuda.synchronize() blocks the host until all streams finish (cudaDeviceSynchronize)."""
    assert not simdist.run(_side_producer("synchronize"), seed=seed).hazards


def test_observed_damage_for_side_stream_race():
    """A racing read sees what memory holds at its time: poison (NaN) in fresh memory."""
    got_nan = False
    for seed in SEEDS:
        res = simdist.run(_side_producer(None), seed=seed)
        if res.hazards[0].observed:
            got_nan |= bool(torch.isnan(res.returns[0]).any())
    assert got_nan


def test_event_before_producer_damage_shows_with_targeted_policy():
    """The 'event recorded before the producer' hazard turns into wrong values when the producer is delayed."""
    fn = _side_producer_event_before()
    h = simdist.run(fn, policy="none").hazards[0]
    res = simdist.run(fn, policy=Targeted({h.first_op_key: 10_000_000}))
    assert res.hazards[0].observed and torch.isnan(res.returns[0]).all()


def test_targeted_policy_turns_possible_into_observed():
    res = simdist.run(_side_producer(None), policy="none")
    h = res.hazards[0]
    assert not h.observed  # without jitter the producer finishes first
    res2 = simdist.run(_side_producer(None), policy=Targeted({h.first_op_key: 10_000_000}))
    assert res2.hazards[0].observed
    assert torch.isnan(res2.returns[0]).all()


def _reuse(record):
    def fn():
        cur = torch.cuda.current_stream()
        side = torch.cuda.Stream()
        x = torch.arange(65536, dtype=torch.float32, device="cuda")
        side.wait_stream(cur)
        with torch.cuda.stream(side):
            torch.cuda._sleep(1_000_000)  # the side stream is busy for a while
            y = x * 2                     # ... then reads x
        if record:
            x.record_stream(side)
        del x                             # freed on its stream; reusable at once there
        z = torch.zeros(65536, device="cuda")  # same size, same stream: the same block
        cur.wait_stream(side)
        return y, z
    return fn


@pytest.mark.parametrize("seed", SEEDS)
def test_same_stream_reuse_while_other_stream_reads_is_a_hazard(seed):
    """Rule: the caching allocator hands a freed block to the next allocation on the same stream at once
    (c10/cuda/CUDACachingAllocator.cpp); another stream still reading it races the new owner."""
    res = simdist.run(_reuse(False), seed=seed)
    assert "reuse-after-free" in kinds(res)
    assert any(h.observed for h in res.hazards)  # the sleep makes the damage show every time
    assert not torch.equal(res.returns[0][0], torch.arange(65536, dtype=torch.float32) * 2)


@pytest.mark.parametrize("seed", SEEDS)
def test_record_stream_defers_reuse(seed):
    """Rule: Tensor.record_stream(s) makes the free wait for the work queued on s (torch docs, record_stream)."""
    res = simdist.run(_reuse(True), seed=seed)
    assert not res.hazards
    assert torch.equal(res.returns[0][0], torch.arange(65536, dtype=torch.float32) * 2)


def test_same_stream_reuse_returns_same_block_and_stale_bytes():
    """Rule: a freed block is reused by the next same-size allocation on its stream and keeps its bytes."""
    def fn():
        a = torch.full((1000,), 7.0, device="cuda")
        p = a.data_ptr()
        del a
        b = torch.empty(1000, device="cuda")
        return p == b.data_ptr(), b
    res = simdist.run(fn)
    same, b = res.returns[0]
    assert same and torch.equal(b, torch.full((1000,), 7.0))
    assert not res.hazards


def test_fresh_memory_is_poison():
    """torch.empty on fresh memory holds poison (NaN), so reading uninitialised memory shows."""
    res = simdist.run(lambda: torch.empty(16, device="cuda"))
    assert torch.isnan(res.returns[0]).all()
    res = simdist.run(lambda: torch.empty(16, device="cuda"), poison="zero")
    assert torch.equal(res.returns[0], torch.zeros(16))


def test_other_stream_does_not_reuse_block():
    """Rule: blocks belong to their allocation stream; another stream gets a different block."""
    def fn():
        a = torch.empty(1000, device="cuda")
        p = a.data_ptr()
        del a
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            b = torch.empty(1000, device="cuda")
        return p != b.data_ptr()
    assert simdist.run(fn).returns[0]


def test_host_read_of_unsynced_side_stream_result():
    """Rule: .item()/.cpu() synchronize only the current stream (a D2H copy on it), not a side stream."""
    def fn(sync):
        side = torch.cuda.Stream()
        x = torch.ones(8, device="cuda")
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            y = x + 1
        if sync:
            side.synchronize()
        return y.sum().item() if sync == "x" else y.cpu()
    for seed in SEEDS:
        assert kinds(simdist.run(fn, args=(False,), seed=seed)) == ["host-read"]
        assert not simdist.run(fn, args=(True,), seed=seed).hazards


def test_event_query_elapsed_and_sleep():
    """Event.elapsed_time measures virtual ms between two recorded events; _sleep is device time."""
    def fn():
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        torch.cuda._sleep(1_980_000)  # ~1 ms at 1.98 GHz
        b.record()
        q = b.query()
        b.synchronize()
        return a.elapsed_time(b), q, b.query()
    ms, q_before, q_after = simdist.run(fn).returns[0]
    assert 0.9 < ms < 1.1 and q_before is False and q_after is True


def test_elapsed_time_refusals_in_torchs_order_and_types():
    """Event.elapsed_time checks, in c10/cuda/CUDAEvent.h's order: both events made with enable_timing=True
    (ValueError), both recorded (ValueError), both completed (RuntimeError). Seen on an H200 with torch 2.11: a
    corpus program expecting RuntimeError for the first failed there while simdist passed it."""
    def fn():
        timed, timed2, plain = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True), \
            torch.cuda.Event()
        out = []
        for a, b in ((timed, plain), (timed, timed2)):  # never recorded: the timing check comes first
            try:
                a.elapsed_time(b)
            except Exception as e:  # noqa: BLE001
                out.append((type(e).__name__, str(e)))
        timed.record()
        torch.cuda._sleep(1_980_000)
        timed2.record()
        try:
            timed.elapsed_time(timed2)  # recorded, not completed
        except Exception as e:  # noqa: BLE001
            out.append((type(e).__name__, str(e)))
        return out
    got, = simdist.run(fn).returns
    assert [t for t, _ in got] == ["ValueError", "ValueError", "RuntimeError"], got
    assert "enable_timing=True" in got[0][1] and "recorded" in got[1][1] and "completed" in got[2][1]


def test_wait_event_never_recorded_is_noop():
    def fn():
        ev = torch.cuda.Event()
        torch.cuda.current_stream().wait_event(ev)
        return torch.ones(2, device="cuda").sum().item()
    assert simdist.run(fn).returns[0] == 2.0


def test_cuda_api_surface():
    def fn():
        torch.cuda.set_device(1)
        x = torch.tensor([1.0, 2.0], device="cuda")
        y = torch.ones(2).cuda()
        z = torch.zeros(2).to("cuda:1")
        s = torch.cuda.Stream()
        return (torch.cuda.is_available(), torch.cuda.device_count(), torch.cuda.current_device(), str(x.device),
                x.is_cuda, (x + y + z).tolist(), torch.cuda.memory_allocated() > 0,
                torch.cuda.current_stream() == torch.cuda.default_stream(), s != torch.cuda.current_stream(),
                float(x[1]), repr(x))
    out = simdist.run(fn, world_size=2).returns[0]
    assert out[:10] == (True, 2, 1, "cuda:1", True, [2.0, 3.0], True, True, True, 2.0)
    assert "device='cuda:1'" in out[10]


def test_common_ops():
    def fn():
        x = torch.arange(12, dtype=torch.float32, device="cuda").reshape(3, 4)
        a = torch.cat([x, x])[:, 1:3].contiguous()
        b, c = x.chunk(2, dim=1)
        x[0, 0] = 100.0
        x[x > 10] = 0.0
        m = x @ x.t()
        f8 = x.to(torch.float8_e4m3fn).to(torch.float32)
        idx = torch.tensor([2, 0], device="cuda")
        return a.sum().item(), b.shape, m.shape, f8, x[idx], torch.nonzero(x).shape, x.max(dim=1).values
    r = simdist.run(fn).returns[0]
    assert r[0] == 78.0 * 2 / 2 + 0 or isinstance(r[0], float)
    assert r[1] == torch.Size([3, 2]) and r[2] == torch.Size([3, 3])


def test_unsupported_raises_named_error():
    def fn():
        x = torch.ones(4, device="cuda")
        x.untyped_storage().fill_(0)  # a storage method simdist does not model (set_ is modelled now)
    with pytest.raises(simdist.UnsupportedOperation, match="fill_"):
        simdist.run(fn)


def test_wrong_device_mix_raises_like_torch():
    def fn():
        return torch.ones(4, device="cuda") + torch.ones(4)
    with pytest.raises(RuntimeError, match="same device"):
        simdist.run(fn)


def test_exception_in_rank_names_rank():
    def fn():
        import torch.distributed as dist
        if dist.get_rank() == 1:
            raise ValueError("boom")
        dist.barrier()
    with pytest.raises(ValueError, match="boom") as ei:
        simdist.run(fn, world_size=2)
    assert any("rank 1" in n for n in getattr(ei.value, "__notes__", []))


def _originals():
    return (torch.cuda.is_available, torch.cuda.Stream, torch.Tensor.record_stream, torch.Tensor.to, torch.tensor,
            torch.cuda.current_stream)


@pytest.mark.parametrize("fail", [False, True])
def test_torch_restored_and_no_threads_left(fail):
    before = _originals()
    n_threads = threading.active_count()

    def fn():
        assert torch.cuda.is_available()
        torch.ones(2, device="cuda")
        if fail:
            raise KeyError("x")
    if fail:
        with pytest.raises(KeyError):
            simdist.run(fn, world_size=3)
    else:
        simdist.run(fn, world_size=3)
    assert _originals() == before
    assert torch.cuda.is_available() == torch.cuda.is_available.__wrapped__() if hasattr(
        torch.cuda.is_available, "__wrapped__") else True
    assert not any(t.name.startswith("simdist") for t in threading.enumerate())
    assert threading.active_count() == n_threads


def test_replay_gives_same_digest():
    res = simdist.run(_side_producer(None), seed=5)
    again = simdist.run(_side_producer(None), policy=simdist.Replay(res.schedule))
    assert again.digest == res.digest


def test_choice_policy_reads_delays():
    fn = _side_producer(None)
    quiet = simdist.run(fn, policy=[0] * 10)
    loud = simdist.run(fn, policy=[0, 200])  # op 0 fills x, op 1 is the side-stream producer
    assert not quiet.hazards[0].observed and loud.hazards[0].observed


def test_pct_reports_bound():
    p = simdist.PCT(seed=1, depth=2)
    simdist.run(_side_producer(None), policy=p)
    assert 0 < p.bound() <= 1


def test_trace_and_report(tmp_path):
    import json
    res = simdist.run(_side_producer(None), seed=0)
    path = res.save_trace(tmp_path / "t.json")
    ev = json.load(open(path))["traceEvents"]
    assert any(e.get("cat") == "hazard" for e in ev)
    assert "read-after-write" in res.report() and "wait_stream" in str(res.hazards[0])
    with pytest.raises(simdist.HazardError):
        res.raise_for_hazards()


def test_non_blocking_device_to_host_copy_needs_a_sync():
    """Rule: a non-blocking D2H copy into pinned memory returns at once; the host must synchronize (stream,
    event or device) before reading the CPU tensor (PyTorch docs, "CUDA semantics: use pinned memory buffers")."""
    def fn(sync):
        y = torch.arange(1024, dtype=torch.float32, device="cuda") * 2
        h = y.to("cpu", non_blocking=True)
        buf = torch.empty(1024, pin_memory=True)
        buf.copy_(y, non_blocking=True)
        if sync == "event":
            ev = torch.cuda.Event()
            ev.record()
            ev.synchronize()
        elif sync == "stream":
            torch.cuda.current_stream().synchronize()
        return h.sum().item(), buf.pin_memory().sum().item()
    for seed in range(5):
        res = simdist.run(fn, args=(None,), seed=seed)
        assert kinds(res) == ["host-read"] and any(h.observed for h in res.hazards)
        for sync in ("event", "stream"):
            ok = simdist.run(fn, args=(sync,), seed=seed)
            assert not ok.hazards and ok.returns[0] == (1047552.0, 1047552.0)


def test_cuda_generator_and_autocast():
    """torch.Generator(device="cuda") seeds simulated random ops deterministically; autocast('cuda') casts."""
    def fn():
        g = torch.Generator(device="cuda")
        g.manual_seed(7)
        a = torch.randn(4, device="cuda", generator=g)
        g.manual_seed(7)
        b = torch.randn(4, device="cuda", generator=g)
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
            y = torch.nn.Linear(8, 4).cuda()(torch.randn(2, 8, device="cuda"))
        return torch.equal(a, b), str(g.device), y.dtype
    assert simdist.run(fn).returns[0] == (True, "cuda:0", torch.bfloat16)
    assert torch.Generator.__module__ == "torch._C" or torch.Generator.__name__ == "Generator"


def _pinned_staging(fix=False, pinned=True, via_copy=False):
    buf = torch.empty(1 << 14, pin_memory=pinned)
    assert buf.is_pinned() == pinned
    dst = torch.empty(1 << 14, device="cuda")
    outs = []
    for i in range(3):
        buf.fill_(float(i))  # the host refills its staging buffer
        if via_copy:
            dst.copy_(buf, non_blocking=True)
            d = dst
        else:
            d = buf.to("cuda", non_blocking=True)
        outs.append(d * 1)
        if fix:
            torch.cuda.current_stream().synchronize()
    return [o.sum().item() for o in outs]


@pytest.mark.parametrize("via_copy", [False, True])
@pytest.mark.parametrize("seed", range(0, 20, 4))
def test_async_h2d_from_pinned_memory_reads_the_buffer_when_it_runs(seed, via_copy):
    # Rule: cudaMemcpyAsync from page-locked memory is a DMA that reads the host buffer when the copy executes
    # (CUDA Runtime API, "API synchronization behavior": async H2D from pinned memory returns at once); PyTorch
    # exposes it as .to("cuda", non_blocking=True) / copy_(..., non_blocking=True) from pin_memory() tensors
    # ("CUDA semantics: use pinned memory buffers"). Refilling the buffer before the copy ran is a race; from
    # pageable memory the copy is staged before the call returns, so reuse is safe.
    want = [float(i) * (1 << 14) for i in range(3)]
    res = simdist.run(_pinned_staging, seed=seed, kwargs={"via_copy": via_copy})
    assert [h.kind for h in res.hazards] == ["write-after-read"]
    assert res.hazards[0].second.stream.endswith("/host")
    if res.returns[0] != want:
        assert res.hazards[0].observed
    fixed = simdist.run(_pinned_staging, seed=seed, kwargs={"via_copy": via_copy, "fix": True})
    assert fixed.hazards == [] and fixed.returns[0] == want
    pageable = simdist.run(_pinned_staging, seed=seed, kwargs={"via_copy": via_copy, "pinned": False})
    assert pageable.hazards == [] and pageable.returns[0] == want


def test_random_ops_follow_seeds_like_separate_processes():
    # Rule: every process starts its CUDA generators at c10's default_rng_seed_val (67280421310721,
    # c10/core/GeneratorImpl.h; aten/src/ATen/cuda/CUDAGeneratorImpl.cpp createCUDAGenerator), so unseeded ranks
    # draw the same CUDA numbers, but its default CPU generator from getNonDeterministicRandom()
    # (aten/src/ATen/CPUGeneratorImpl.cpp getDefaultCPUGenerator), so unseeded ranks draw other CPU numbers
    # (simdist: a fixed seed per rank, world.process_seed; notes z2); torch.manual_seed(s) reseeds the CPU
    # and every CUDA generator of that process only (torch/random.py); reseeding repeats the draws, also for
    # ops whose schema has no generator argument (aten.randn.default, randperm, randint).
    def prog():
        out = {"init": torch.initial_seed(), "cuda0": torch.randn(4, device="cuda").cpu(),
               "cpu0": torch.randn(4), "perm0": torch.randperm(6, device="cuda").cpu()}
        torch.manual_seed(7)
        a, ca = torch.randn(4, device="cuda").cpu(), torch.rand(3)
        ia = torch.randint(0, 100, (5,), device="cuda").cpu()
        torch.manual_seed(7)
        b, cb = torch.randn(4, device="cuda").cpu(), torch.rand(3)
        ib = torch.randint(0, 100, (5,), device="cuda").cpu()
        out["repeat"] = torch.equal(a, b) and torch.equal(ca, cb) and torch.equal(ia, ib)
        if dist.get_rank() == 1:
            torch.manual_seed(123)  # rank 1's reseed must not move rank 0's generators
        out["after"] = torch.randn(4, device="cuda").cpu()
        return out

    torch.manual_seed(42)
    before = torch.rand(2)
    torch.manual_seed(42)
    res = simdist.run(prog, world_size=2)
    assert torch.equal(torch.rand(2), before)  # the caller's generator is untouched by the ranks
    r0, r1 = res.returns
    assert len({r0["init"], r1["init"], 67280421310721}) == 3
    for k in ("cuda0", "perm0"):
        assert torch.equal(r0[k], r1[k]), k
    assert not torch.equal(r0["cpu0"], r1["cpu0"])
    assert r0["repeat"] and r1["repeat"]
    assert not torch.equal(r0["after"], r1["after"])
    again = simdist.run(prog, world_size=2, seed=5)  # the schedule seed does not change the values
    assert torch.equal(again.returns[0]["after"], r0["after"])


def _host_draws():
    import random as _random

    import numpy as _np
    loader = torch.utils.data.DataLoader(list(range(16)), batch_size=4, shuffle=True)  # RandomSampler: CPU gen
    return {"init": torch.initial_seed(), "cpu": torch.rand(3).tolist(), "py": _random.random(),
            "np": float(_np.random.rand()), "batch": next(iter(loader)).tolist(), "cuda": torch.cuda.initial_seed(),
            "gen": torch.rand(2, generator=torch.Generator()).tolist(), "default": torch.rand(2).tolist()}


@pytest.mark.parametrize("transport", ["threads", "processes"])
def test_host_generators_differ_per_rank_and_repeat_per_run(transport):
    """Rule: a process torchrun starts seeds its host generators nondeterministically: torch's default CPU
    generator with getNonDeterministicRandom() (aten/src/ATen/CPUGeneratorImpl.cpp getDefaultCPUGenerator),
    Python's random and numpy's global RandomState from the OS's entropy; only the CUDA generators start at
    default_rng_seed_val, and torch.Generator() does too. So unseeded ranks shuffle other batches (a DataLoader's
    RandomSampler draws its seed from the CPU generator): Megatron-LM's examples/run_simple_mcore_train_loop.py
    (core_v0.16.1) gives its two tensor-parallel ranks different batches and different replicated position
    embeddings on GPUs. simdist gave every rank the same CPU seed (the program looked consistent) and left Python's
    random to the fork (another value every run). Now: a fixed seed per rank, other on every rank, the same in
    every run and transport, the caller's generators untouched (notes z2)."""
    import random as _random

    import numpy as _np
    def seeded_draws():
        torch.manual_seed(3)
        _random.seed(3)
        _np.random.seed(3)
        return torch.rand(1).item(), _random.random(), _np.random.rand()

    want = seeded_draws()
    torch.manual_seed(3)
    _random.seed(3)
    _np.random.seed(3)
    res = simdist.run(_host_draws, world_size=2, transport=transport)
    assert (torch.rand(1).item(), _random.random(), _np.random.rand()) == want  # the caller's, as it left them
    r0, r1 = res.returns
    for k in ("init", "cpu", "py", "np", "batch"):
        assert r0[k] != r1[k], k
    assert r0["cuda"] == r1["cuda"] == 67280421310721
    assert r0["gen"] == r1["gen"] != r0["default"]  # torch.Generator() starts at default_rng_seed_val
    again = simdist.run(_host_draws, world_size=2, seed=4, transport="processes" if transport == "threads" else "threads")
    assert again.returns == res.returns  # a pure function of the program: not of the schedule seed or transport


def test_polling_a_query_lets_time_pass():
    # Rule: Event.query() / Stream.query() return False until the work is done, and a host that polls spends
    # time meanwhile (cudaEventQuery); a polling loop ends. Polling work that can never finish is a Deadlock,
    # reported quickly, not a hang.
    def poll():
        side = torch.cuda.Stream()
        ev = torch.cuda.Event()
        with torch.cuda.stream(side):
            torch.cuda._sleep(1_000_000)
            y = torch.ones(4, device="cuda") * 3
        ev.record(side)
        polls = 0
        while not ev.query():
            polls += 1
        assert side.query()
        torch.cuda.current_stream().wait_event(ev)
        return polls, y.sum().item()

    res = simdist.run(poll)
    assert res.hazards == [] and res.returns[0][1] == 12.0 and res.returns[0][0] >= 1

    def livelock():
        # device_id: communicators are made at init, so the only wait left is the poll itself
        dist.init_process_group("nccl", device_id=torch.device("cuda", int(os.environ["RANK"])))
        x = torch.ones(4, device="cuda")
        if dist.get_rank() == 0:
            w = dist.all_reduce(x, async_op=True)
            while not w.is_completed():
                pass
            dist.send(x, 1)
        else:
            dist.recv(x, 0)
            dist.all_reduce(x)

    t = time.perf_counter()
    with pytest.raises(simdist.Deadlock, match="polling"):
        simdist.run(livelock, world_size=2)
    assert time.perf_counter() - t < 10


def test_non_blocking_copy_into_pageable_memory_is_synchronous():
    # Rule: cudaMemcpyAsync device-to-host into pageable memory returns once the copy is done (CUDA Runtime
    # API, "API synchronization behavior"); only a page-locked destination makes it asynchronous. And
    # Tensor.tolist() is a host read like any other.
    def prog(pinned):
        x = torch.arange(8., device="cuda") * 2
        out = torch.empty(8, pin_memory=pinned)
        out.copy_(x, non_blocking=True)
        return out.tolist()

    want = [2.0 * i for i in range(8)]
    for seed in range(5):
        res = simdist.run(prog, args=(False,), seed=seed)
        assert res.hazards == [] and res.returns[0] == want
        res = simdist.run(prog, args=(True,), seed=seed)
        assert [h.kind for h in res.hazards] == ["host-read"]


def test_cuda_rng_state_and_memory_stats_api():
    # torch.cuda.get_rng_state / set_rng_state / fork_rng restore a device generator's (seed, offset), so the
    # draws after a restore repeat (torch/cuda/random.py); memory_stats reports the allocator's bytes; and
    # data_ptr shows the caching allocator's same-stream reuse of a freed block (CUDACachingAllocator.cpp).
    def fn():
        st = torch.cuda.get_rng_state()
        a = torch.randn(4, device="cuda").cpu()
        torch.cuda.set_rng_state(st)
        b = torch.randn(4, device="cuda").cpu()
        with torch.random.fork_rng(devices=[0]):
            torch.cuda.manual_seed(5)
            torch.randn(4, device="cuda")
        c = torch.randn(4, device="cuda").cpu()
        torch.cuda.set_rng_state(st)
        torch.randn(4, device="cuda")
        d = torch.randn(4, device="cuda").cpu()
        x = torch.empty(1024, device="cuda")
        p = x.data_ptr()
        stats = torch.cuda.memory_stats()["allocated_bytes.all.current"]
        del x
        y = torch.empty(1024, device="cuda")
        return torch.equal(a, b), torch.equal(c, d), stats >= 4096, y.data_ptr() == p, \
            torch.cuda.initial_seed() == 67280421310721

    assert simdist.run(fn).returns[0] == (True, True, True, True, True)


def test_query_true_means_results_visible_to_host():
    """Rule: Event.query() / Stream.query() return True only once the captured work has completed
    (cudaEventQuery / cudaStreamQuery == cudaSuccess), so the host may then read a pinned buffer that work wrote
    and find the results (torch/cuda/streams.py). simdist once joined the host's clock without running the
    finished copy's kernel first: the pinned buffer still held its old bytes (corpus m06, m07)."""
    def fn(use_stream):
        a = torch.arange(1 << 15, dtype=torch.float32)
        x = a.cuda() * 2
        buf = torch.zeros(1 << 15, pin_memory=True)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        done = torch.cuda.Event()
        with torch.cuda.stream(side):
            buf.copy_(x, non_blocking=True)
            done.record()
        x.record_stream(side)
        while not (side.query() if use_stream else done.query()):
            pass
        return torch.equal(buf, a * 2)
    for use_stream in (False, True):
        for seed in range(10):
            res = simdist.run(fn, seed=seed, kwargs={"use_stream": use_stream})
            assert not res.hazards and res.returns[0], (use_stream, seed)


def test_set_stream_switches_current_device():
    """Rule: torch.cuda.set_stream(s) makes s's device the current one as well (torch/csrc/cuda/Module.cpp
    THCPModule_setStream_wrap: `if (device != stream.device_index()) THCPModule_setDevice(...)`), so a later
    torch.empty(device="cuda") lands on it (corpus m04)."""
    def fn():
        s1 = torch.cuda.Stream(device=1)
        torch.cuda.set_stream(s1)
        t = torch.ones(4, device="cuda")
        return torch.cuda.current_device(), t.device.index, torch.cuda.current_stream() == s1
    res = simdist.run(fn, device_count=2)
    assert res.returns[0] == (1, 1, True)


def test_empty_cache_waits_for_record_stream_events_and_peaks_persist():
    """Rule: torch.cuda.empty_cache() first synchronizes the events of blocks freed with record_stream uses
    pending, returns them to their pools, then releases every whole free segment
    (c10/cuda/CUDACachingAllocator.cpp release_cached_blocks -> synchronize_and_free_events, release_blocks); the
    peak of reserved memory (max_memory_reserved, memory_stats()['reserved_bytes.all.peak']) survives the release
    until reset_peak_memory_stats (corpus m21, m23)."""
    def fn():
        torch.cuda.empty_cache()
        r0 = torch.cuda.memory_reserved()
        side = torch.cuda.Stream()
        x = torch.ones(1 << 20, device="cuda")      # 4 MiB: a 20 MiB large segment of its own
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            y = x * 2
        x.record_stream(side)
        del x
        peak = torch.cuda.max_memory_reserved()
        torch.cuda.empty_cache()
        after = torch.cuda.memory_reserved()
        stats = torch.cuda.memory_stats()
        kept_peak = torch.cuda.max_memory_reserved()
        torch.cuda.reset_peak_memory_stats()
        return r0, after, peak, kept_peak, stats["reserved_bytes.all.peak"], torch.cuda.max_memory_reserved(), \
            stats["allocation.all.current"], y.sum().item()
    for seed in range(5):
        res = simdist.run(fn, seed=seed)
        r0, after, peak, kept_peak, stat_peak, reset_peak, live, total = res.returns[0]
        # y (made on the side stream) keeps a 20 MiB segment of its own; x's segment is released
        assert after == r0 + 20 * (1 << 20) and peak == kept_peak == stat_peak == r0 + 40 * (1 << 20), res.returns[0]
        assert reset_peak == after and live == 1 and total == 2.0 * (1 << 20), res.returns[0]
        assert not res.hazards


def test_h2d_from_pinned_reads_in_stream_order():
    """Rule: a host-to-device copy from pinned memory is a DMA that reads the host buffer when it runs, in its
    stream's order (ATen Copy.cu copy_kernel_cuda: cudaMemcpyAsync on the current stream, then
    cudaStreamSynchronize when not non_blocking). After a non_blocking D2H copy into that buffer on the same
    stream it reads the copied bytes (autograd's save_on_cpu(pin_memory=True) relies on it: corpus m18); on
    another stream with no wait it races the D2H copy. simdist once snapshotted the buffer at a blocking
    copy_'s launch (stale bytes, silently) and reported the non_blocking one as a host read."""
    def fn(stream_kind, how):
        a = torch.arange(1 << 14, dtype=torch.float32)
        x = a.cuda() * 2
        buf = torch.zeros(1 << 14, pin_memory=True)
        buf.copy_(x, non_blocking=True)
        s = torch.cuda.current_stream() if stream_kind == "same" else torch.cuda.Stream()
        with torch.cuda.stream(s):
            if how == "copy_":
                d = torch.empty(1 << 14, device="cuda")
                d.copy_(buf)
            elif how == "to":
                d = buf.to("cuda")
            else:
                d = buf.to("cuda", non_blocking=True)
        torch.cuda.synchronize()
        return torch.equal(d.cpu(), a * 2)
    for how in ("copy_", "to", "to_non_blocking"):
        for seed in range(5):
            res = simdist.run(fn, seed=seed, kwargs={"stream_kind": "same", "how": how})
            assert not res.hazards and res.returns[0], (how, seed, res.report())
            res = simdist.run(fn, seed=seed, kwargs={"stream_kind": "other", "how": how})
            assert kinds(res) == ["read-after-write"], (how, seed, res.report())


@pytest.mark.skipif(not guard.available(), reason=f"autograd unavailable: {guard.reason()}")  # (CUDA builds)
def test_checkpoint_recompute_replays_cuda_dropout_mask():
    """Rule: torch.utils.checkpoint with preserve_rng_state=True (the default) saves the CUDA RNG state in the
    forward and restores it for the recomputation, so dropout draws the same mask (torch/utils/checkpoint.py:
    get_device_states / set_device_states, done only when `torch.cuda._initialized`, had_device_in_fwd). simdist
    left `_initialized` False (a CPU build's): the recomputed mask differed and the gradients were silently
    wrong (corpus m29)."""
    from torch.utils.checkpoint import checkpoint

    def fn(reentrant):
        x = torch.ones(1000, device="cuda", requires_grad=True)
        y = checkpoint(lambda t: torch.nn.functional.dropout(t, 0.5, training=True) * 3, x,
                       use_reentrant=reentrant)
        y.sum().backward()
        return torch.equal((y.detach() != 0).cpu(), (x.grad != 0).cpu())
    for reentrant in (False, True):
        res = simdist.run(fn, kwargs={"reentrant": reentrant})
        assert res.returns[0] and not res.hazards


def test_generator_get_state_set_state_replays():
    """Rule: Generator.set_state(g.get_state()) puts the generator back where it was, so the next draws repeat
    (torch.Generator.get_state / set_state; torch.cuda.get_rng_state / set_rng_state for the default CUDA
    generator). simdist's generators once returned (seed, offset) for a CPU generator and for a
    torch.Generator(device='cuda') whose ops draw from the CPU state underneath: set_state restarted the
    sequence from the seed (corpus m27)."""
    def fn():
        out = []
        g = torch.Generator().manual_seed(3)
        torch.randn(7, generator=g)
        st = g.get_state()
        a = torch.randn(5, generator=g)
        g.set_state(st)
        out.append(torch.equal(a, torch.randn(5, generator=g)))
        gc = torch.Generator(device="cuda").manual_seed(3)
        torch.rand(7, device="cuda", generator=gc)
        st = gc.get_state()
        a = torch.randint(0, 100, (64,), device="cuda", generator=gc)
        gc.set_state(st)
        out.append(torch.equal(a.cpu(), torch.randint(0, 100, (64,), device="cuda", generator=gc).cpu()))
        torch.rand(3, device="cuda")
        st = torch.cuda.get_rng_state()
        a = torch.nn.functional.dropout(torch.ones(64, device="cuda"), 0.5)
        torch.cuda.set_rng_state(st)
        out.append(torch.equal(a.cpu(), torch.nn.functional.dropout(torch.ones(64, device="cuda"), 0.5).cpu()))
        return out
    assert simdist.run(fn).returns[0] == [True, True, True]


def test_torch_save_of_pending_pinned_copy_is_a_host_read():
    """Rule: torch.save (and pickling a tensor, which goes through it) reads each CPU storage's bytes at the call
    (torch/serialization.py _save: location_tag, then zip_file.write_record of the storage), so saving a pinned
    buffer that a non_blocking D2H copy has not been waited for is a host read, as .numpy() or .item() are;
    after a synchronize it is clean. simdist once saved the stale bytes silently (corpus m44, m45)."""
    import io
    import pickle

    def fn(sync, how):
        x = torch.arange(1 << 14, dtype=torch.float32, device="cuda") * 2
        buf = torch.empty(1 << 14, pin_memory=True)
        buf.copy_(x, non_blocking=True)
        if sync:
            torch.cuda.synchronize()
        if how == "save":
            torch.save({"w": buf}, io.BytesIO())
        else:
            pickle.dumps(buf)
        torch.cuda.synchronize()
    for how in ("save", "pickle"):
        assert kinds(simdist.run(fn, kwargs={"sync": False, "how": how})) == ["host-read"], how
        assert not simdist.run(fn, kwargs={"sync": True, "how": how}).hazards, how


def test_numpy_of_a_pending_pinned_copy_reads_nothing_reads_through_the_array_do():
    """Rule: Tensor.numpy() shares the tensor's bytes and reads none of them (torch/csrc/utils/tensor_numpy.cpp
    tensor_to_numpy wraps the storage; https://pytorch.org/docs/stable/generated/torch.Tensor.numpy.html "the
    returned ndarray and the tensor will share their storage"), so taking the array of a pinned buffer that a
    non_blocking D2H copy is still writing, then waiting for the copy, then reading the array, is clean: Megatron-
    Core 0.16.1's alltoall token dispatcher does exactly this (token_dispatcher.py _maybe_dtoh_and_synchronize:
    `.to("cpu", non_blocking=True).numpy()` on a side stream, `d2h_event.synchronize()` before the splits are
    used). A read through the array (a reduction, iteration, an element) before the wait is a host read. simdist
    reported the .numpy() call itself (notes w4)."""
    def fn(how):
        side = torch.cuda.Stream()
        x = torch.arange(1 << 10, device="cuda") * 3
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            arr = x.to("cpu", non_blocking=True).numpy()
            x.record_stream(side)
        ev = side.record_event()
        early = None
        if how == "sum":
            early = int(arr.sum())
        elif how == "iter":
            early = sum(int(v) for v in arr[:4])
        elif how == "item":
            early = int(arr[5])
        tail = arr[512:]                        # a view: reads nothing
        ev.synchronize()
        return early, int(arr.sum()), [int(v) for v in tail[:2]]
    res = simdist.run(fn, kwargs={"how": "none"})
    assert not res.hazards and res.returns[0] == (None, 3 * (1023 * 1024 // 2), [1536, 1539])
    for how in ("sum", "iter", "item"):
        assert kinds(simdist.run(fn, kwargs={"how": how})) == ["host-read"], how


def test_data_dependent_output_is_written_after_the_host_sync():
    """Rule: an op whose output size depends on the data (nonzero, masked_select) synchronizes the host with the
    current stream, then allocates its output and launches the kernel that writes it
    (aten/src/ATen/native/cuda/Nonzero.cu: count, copy to the host, synchronize, resize, write), so a block that
    the caching allocator releases at that allocation (its record_stream event observed complete) is written
    after the host observed the other stream's work: no reuse-after-free. simdist attributed the write to the
    counting kernel launched before the sync and reported one (Megatron's MoE permute, notes w3)."""
    def fn(op):
        side = torch.cuda.Stream()
        src = torch.arange(16, device="cuda")
        mask = src > 1
        a = torch.arange(4, device="cuda") * 3
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            host = a.to("cpu", non_blocking=True)
            a.record_stream(side)
        ev = side.record_event()
        del a                                   # reuse waits for the side stream's copy
        torch.randn(1 << 16, device="cuda").sum()  # the current stream runs past the copy
        out = src.masked_select(mask) if op == "masked_select" else mask.nonzero().flatten()
        ev.synchronize()
        return host.tolist(), out.tolist()[:3]
    for op, first in (("masked_select", [2, 3, 4]), ("nonzero", [2, 3, 4])):
        res = simdist.run(fn, args=(op,))
        assert not res.hazards, (op, res.report())
        assert res.returns[0] == ([0, 3, 6, 9], first)


def test_views_of_pending_pinned_buffer_read_nothing_reads_through_them_do():
    """Rule: a view of a pinned buffer that a non_blocking D2H copy is writing reads no bytes (views share
    storage: https://pytorch.org/docs/stable/tensor_view.html), so taking it before the synchronize is clean;
    a read through it (an op, .numpy(), print, which formats with dispatch modes off) before the synchronize
    is a host read, at any offset into the buffer. simdist once reported the view itself and missed reads
    through views at another offset and through print (corpus m46, m47)."""
    def fn(how):
        x = torch.arange(1 << 12, dtype=torch.float32, device="cuda")
        flat = torch.empty(1 << 12, pin_memory=True)
        flat.copy_(x, non_blocking=True)
        tail = flat[1 << 11:].view(32, 64)
        if how == "print":
            print(tail[1])
        elif how == "sum":
            tail.sum()
        elif how == "numpy":
            tail.numpy().sum()
        torch.cuda.synchronize()
        return torch.equal(tail.flatten(), torch.arange(1 << 11, 1 << 12, dtype=torch.float32))
    res = simdist.run(fn, kwargs={"how": "none"})
    assert not res.hazards and res.returns[0]
    for how in ("print", "sum", "numpy"):
        assert kinds(simdist.run(fn, kwargs={"how": how})) == ["host-read"], how


def test_a_data_dependent_index_error_in_a_kernel_is_a_device_side_assert():
    """A bounds check that fails inside a CUDA kernel (embedding, index, gather/scatter, nll_loss targets) is a
    device-side assert: torch.AcceleratorError (a RuntimeError) "CUDA error: device-side assert triggered"
    (c10/cuda/CUDAException.h C10_CUDA_CHECK; CUDA_KERNEL_ASSERT in aten/src/ATen/native/cuda/Indexing.cu), while
    shape errors are still raised at launch by the op's host code. simdist raised the CPU kernel's IndexError,
    which a GPU never raises there (wrong exception type)."""
    import simdist
    err = getattr(torch, "AcceleratorError", RuntimeError)

    def fn():
        out = []
        for f in (lambda: torch.nn.functional.embedding(torch.tensor([12], device="cuda"),
                                                          torch.ones(10, 2, device="cuda")).sum().item(),
                  lambda: torch.ones(3, device="cuda").gather(0, torch.tensor([5], device="cuda")).item(),
                  lambda: torch.nn.functional.cross_entropy(torch.zeros(2, 3, device="cuda"),
                                                            torch.tensor([0, 4], device="cuda")).item()):
            try:
                f()
            except err as e:
                out.append("device-side assert triggered" in str(e) and not isinstance(e, IndexError))
        try:
            torch.ones(2, device="cuda") + torch.ones(3, device="cuda")
        except RuntimeError as e:
            out.append(type(e) is RuntimeError)
        return out

    assert simdist.run(fn).returns == [[True, True, True, True]]


def test_the_33rd_stream_of_a_priority_is_the_first_again_ordered_and_sharing_its_cached_blocks():
    """torch.cuda.Stream() takes a stream from the device's pool (c10/cuda/CUDAStream.h, "Stream pool note": 32
    streams per priority level, round-robin; "the first and last [of 33] streams requested are actually the same
    stream"). So the 33rd stream equals the first, work on the two is in launch order (no race), and a block freed
    on the first is reused by an allocation on the 33rd (CUDACachingAllocator.cpp get_free_block matches the
    block's stream). simdist made a new stream every time: a false race and memory never reused."""
    def fn():
        streams = [torch.cuda.Stream() for _ in range(33)]
        first, last = streams[0], streams[32]
        with torch.cuda.stream(first):
            x = torch.ones(1 << 16, device="cuda")
            ptr = x.data_ptr()
            x.mul_(2)
            del x
        with torch.cuda.stream(last):
            y = torch.empty(1 << 16, device="cuda")  # first's block, and ordered after first's mul_
            y.fill_(3.0)
        torch.cuda.current_stream().wait_stream(last)
        hi = [torch.cuda.Stream(priority=-1) for _ in range(33)]
        return (first == last, len({s.stream_id for s in streams[:32]}), y.data_ptr() == ptr,
                y.sum().item(), hi[32] == hi[0], hi[0] == first)

    res = simdist.run(fn)
    assert not res.hazards, res.report()
    assert res.returns == [(True, 32, True, 3.0 * (1 << 16), True, False)]


def test_memory_stats_has_every_key_of_the_native_allocator_with_an_h200s_figures():
    """torch.cuda.memory_stats() is the native caching allocator's DeviceStats flattened and sorted (torch/cuda/
    memory.py memory_stats; c10/cuda/CUDACachingAllocator.cpp keeps the figures: alloc_found_block, free,
    free_block, release_block, synchronize_and_free_events, resetAccumulatedStats, which zeroes num_device_alloc
    too). simdist gave 11 of its 122 keys (a `.get(key, 0)` read 0) and counted a zero-byte tensor as a 512-byte
    block (CUDACachingAllocator::allocate mallocs only `if (size != 0)`). Both scripted sequences of
    ci/x_memory_sequences.py must give the H200's figures (docs/gpu/x-series-facts2-2026-12-02.json), key for key.
    One snapshot is left out: on the H200 the side stream's record_stream event had completed by the next malloc
    ("merged": the block was freed and merged), in simdist's virtual time the side stream's 25 ms sleep had not, a
    schedule difference, not a bookkeeping one (and with it the inactive_split_bytes peak of "emptied")."""
    import json
    import os
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sys.path.insert(0, root)
    from ci.x_memory_sequences import sequence1, sequence2
    with open(os.path.join(root, "docs", "gpu", "x-series-facts2-2026-12-02.json")) as f:
        gpu = json.load(f)

    (s1, s2), = simdist.run(lambda: (sequence1(), sequence2())).returns
    assert sorted(s1) == gpu["memory_stats_keys"] and len(s1) == 122
    assert s1 == gpu["memory_stats_after_sequence"]
    for name, want in gpu["memory_stats_sequence2"].items():
        if name == "merged":
            continue
        got = dict(s2[name])
        if name == "emptied":
            got.pop("inactive_split_bytes.all.peak")
            want = {k: v for k, v in want.items() if k != "inactive_split_bytes.all.peak"}
        assert got == want, (name, {k: (got.get(k), v) for k, v in want.items() if got.get(k) != v})


def test_like_factories_of_a_host_tensor_onto_the_device_are_factories():
    """Rule: torch.zeros_like(host, device="cuda") and host.new_zeros(n, device="cuda") read only the host tensor's
    metadata: ATen's zeros_like is empty_like(self, options).zero_() and new_zeros is zeros(size,
    self.options().merge_in(options)) (aten/src/ATen/native/TensorFactories.cpp), so they make a device tensor as
    any factory does, with empty_like's strides (preserve_format keeps a dense input's), and rand_like draws from
    the device generator as it does for a device input. vLLM's CpuGpuBuffer makes its device half so; simdist
    raised NotImplementedError from the CPU build's CUDA backend (notes x22; H200: ci/gpu_x_facts3.py)."""
    def fn():
        c = torch.arange(6, dtype=torch.float32).reshape(2, 3)
        p = torch.zeros(2, 3, pin_memory=True)
        got = {}
        for name, t in (("zeros_like", torch.zeros_like(c, device="cuda")),
                        ("zeros_like_pinned", torch.zeros_like(p, device="cuda")),
                        ("full_like", torch.full_like(c, 7.0, device="cuda")),
                        ("ones_like_t", torch.ones_like(c.t(), device="cuda")),
                        ("new_ones", c.new_ones((4,), device="cuda")),
                        ("new_full", c.new_full((4,), 3.0, device="cuda"))):
            got[name] = (t.device.type, tuple(t.stride()), t.cpu().tolist())
        torch.manual_seed(5)
        a = torch.rand_like(c, device="cuda")
        torch.manual_seed(5)
        b = torch.rand_like(torch.empty_like(c, device="cuda"))
        got["rand_like_same_draw"] = torch.equal(a.cpu(), b.cpu())
        return got
    res = simdist.run(fn)
    assert not res.hazards
    got = res.returns[0]
    assert got["zeros_like"] == ("cuda", (3, 1), [[0.0] * 3] * 2)
    assert got["zeros_like_pinned"] == ("cuda", (3, 1), [[0.0] * 3] * 2)
    assert got["full_like"] == ("cuda", (3, 1), [[7.0] * 3] * 2)
    assert got["ones_like_t"] == ("cuda", (1, 3), [[1.0] * 2] * 3)
    assert got["new_ones"] == ("cuda", (1,), [1.0] * 4) and got["new_full"] == ("cuda", (1,), [3.0] * 4)
    assert got["rand_like_same_draw"]
    # the H200's answers to the same calls (ci/gpu_x_facts3.py, torch 2.11, 2026-12-02)
    import json
    with open(os.path.join(os.path.dirname(__file__), "..", "docs", "gpu", "x-series-facts3-2026-12-02.json")) as f:
        h200 = json.load(f)["x22_like_factories"]
    for mine, theirs in (("zeros_like", "zeros_like"), ("zeros_like_pinned", "zeros_like_pinned"),
                         ("full_like", "full_like"), ("ones_like_t", None), ("new_ones", "new_ones"),
                         ("new_full", "new_full")):
        if theirs:
            assert got[mine] == ("cuda", tuple(h200[theirs]["stride"]), h200[theirs]["values"]), mine
    assert tuple(h200["zeros_like_transposed"]["stride"]) == got["ones_like_t"][1]
    assert h200["rand_like_host_arg_equals_device_arg"] == got["rand_like_same_draw"]


@pytest.mark.parametrize("how", ["none", "write", "write_after_event", "write_other_half", "copyto", "ufunc_out",
                                 "fill", "read", "read_after_sync"])
def test_numpy_array_of_a_pinned_buffer_is_watched_whenever_it_was_made(how):
    """Rule: a numpy array of a pinned tensor shares its page-locked bytes (Tensor.numpy docs), and a non_blocking
    H2D copy from pinned memory reads them when it runs, a D2H copy writes them when it runs
    (https://pytorch.org/tutorials/intermediate/pinmem_nonblock.html), whenever the array was made. So a host
    write through an array made before the copy (vLLM's CpuGpuBuffer.np, made once) while an H2D copy from the
    same bytes is pending is write-after-read, unless the host waited for an event recorded after the copy or
    writes bytes the copy does not read; a read through it while a D2H copy into it is pending is a host read.
    simdist watched only arrays made while a D2H copy was pending, and never their writes (notes x23, corpus x26)."""
    def fn(how):
        pinned = torch.zeros(1024, dtype=torch.int64, pin_memory=True)
        arr = pinned.numpy()
        gpu = torch.zeros(1024, dtype=torch.int64, device="cuda")
        if how.startswith("read"):
            pinned.copy_(torch.arange(1024, device="cuda"), non_blocking=True)
            if how == "read_after_sync":
                torch.cuda.synchronize()
            return int(arr[:8].sum())
        ev = torch.cuda.Event()
        gpu[:512].copy_(pinned[:512], non_blocking=True)
        ev.record()
        if how == "write":
            arr[:4] = 7
        elif how == "write_after_event":
            ev.synchronize()
            arr[:4] = 7
        elif how == "write_other_half":
            arr[512:] = 7
        elif how == "copyto":
            np = __import__("numpy")
            np.copyto(arr[:4], 7)
        elif how == "ufunc_out":
            arr[:4] += 7
        elif how == "fill":
            arr[:4].fill(7)
        torch.cuda.synchronize()
        return int(gpu[:4].sum())
    res = simdist.run(fn, args=(how,))
    want = {"write": ["write-after-read"], "copyto": ["write-after-read"], "ufunc_out": ["write-after-read"],
            "fill": ["write-after-read"], "read": ["host-read"]}.get(how, [])
    assert kinds(res) == want, res.report()
    if not want:
        assert res.returns[0] == (28 if how == "read_after_sync" else 0)


def test_block_taken_again_on_its_stream_and_first_written_by_another_stream_races_the_old_reads():
    """Rule: the caching allocator hands a block freed on stream S to S's next allocation at once; only S's work is
    ordered after the old owner's queued use (https://pytorch.org/docs/stable/notes/cuda.html#cuda-memory-management:
    "it's safe to use it on the stream it was allocated on"). When the new tensor is first written by a copy on
    another stream that did not wait for S (apex's data_prefetcher alternative with its wait_stream line left
    commented out: corpus x29), the write races S's queued reads of the old tensor (the H200: ci/gpu_x_facts3.py
    x24 fact). simdist dropped S's records of the block at the free (Detector.on_free kept other streams' only)
    and reported nothing, though the values were damaged; the block now keeps S's last accesses (engine/prior.py)."""
    def fn():
        side = torch.cuda.Stream()
        a = torch.full((1 << 16,), 1.0, device="cuda")
        s = a.sum()
        del a
        b = torch.empty(1 << 16, device="cuda")
        host = torch.full((1 << 16,), 2.0).pin_memory()
        with torch.cuda.stream(side):
            b.copy_(host, non_blocking=True)
        torch.cuda.synchronize()
        return s.item()
    for seed in range(3):
        assert "reuse-after-free" in kinds(simdist.run(fn, seed=seed))


def test_cufft_plan_cache_max_size_is_a_per_device_setting_and_size_a_named_refusal():
    """Rule (https://pytorch.org/docs/stable/notes/cuda.html#cufft-plan-cache): each device has a cuFFT plan cache;
    `torch.backends.cuda.cufft_plan_cache[i].max_size` is its capacity (4096 with CUDA >= 10:
    aten/src/ATen/native/cuda/CuFFTPlanCache.h CUFFT_DEFAULT_CACHE_SIZE), settable (negative: "cuFFT plan cache
    size must be non-negative"), the bare manager meaning the current device's; `.size` is read-only and
    `.clear()` empties it. On the CPU build every access raised torch's "Cannot access cuFFT plan cache without
    ATen_cuda library" RuntimeError, which names no reason. simdist keeps max_size per rank and device and refuses
    `.size` (which plans a transform makes is not modelled) by name."""
    def fn():
        c = torch.backends.cuda.cufft_plan_cache
        x = torch.randn(64, device="cuda")
        back = torch.fft.irfft(torch.fft.rfft(x), n=64)
        out = [bool(torch.allclose(back, x, atol=1e-5)), c.max_size]
        c.max_size = 10
        out += [c[0].max_size, c[1].max_size]
        c.clear()
        with pytest.raises(RuntimeError, match="must be non-negative, but got -1"):
            c.max_size = -1
        with pytest.raises(RuntimeError, match="read-only"):
            c.size = 3
        with pytest.raises(RuntimeError, match="expected 0 <= device index < 2, but got device with index 2"):
            c[2]
        with pytest.raises(simdist.UnsupportedOperation, match="cufft_plan_cache.size"):
            c.size
        return out
    assert simdist.run(fn, device_count=2).returns == [[True, 4096, 10, 4096]]
    assert simdist.run(fn, device_count=2).returns == [[True, 4096, 10, 4096]]  # a setting of the run only


def test_cuda_launch_blocking_makes_kernel_launches_wait_but_not_async_copies(monkeypatch):
    """Rule (https://pytorch.org/docs/stable/notes/cuda.html#asynchronous-execution): "you can force synchronous
    computation by setting environment variable CUDA_LAUNCH_BLOCKING=1"; the CUDA runtime reads it when CUDA is
    initialized (an H200, torch 2.11: set after `import torch`, before the first CUDA call, it takes effect). Each
    kernel launch then returns when the kernel has run, so a side stream's kernel that reads a tensor the default
    stream's kernel wrote before it, without a wait, is ordered through the host (measured there: query() True
    right after a launched _sleep, a same-device copy_, a clone, a cast, an add_). A device-to-host
    cudaMemcpyAsync is not made synchronous (measured: a pinned copy_(non_blocking=True) returned at once, its
    stream busy). NCCL kernels under it are refused by name. simdist ignored the variable (a false
    read-after-write)."""
    def kernels():
        side = torch.cuda.Stream()
        x = torch.ones(1 << 16, device="cuda")
        with torch.cuda.stream(side):
            y = x * 2                       # no wait_stream: x's fill ran before the launch returned
        return (y + 1).sum().item()         # no wait on side: y's kernel has run

    def pinned_d2h():
        x = torch.full((1 << 16,), 3.0, device="cuda")
        h = torch.empty(1 << 16).pin_memory()
        h.copy_(x, non_blocking=True)
        return h.sum().item()               # no synchronize: the copy may still run

    def copy_d2d():
        side = torch.cuda.Stream()
        a = torch.ones(1 << 16, device="cuda")
        b = torch.empty(1 << 16, device="cuda")
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            b.copy_(a)                       # on side: it has run when copy_ returns
        c = b + 1                            # no wait on side
        torch.cuda.synchronize()
        return c[0].item()

    def collective():
        t = torch.ones(4, device="cuda")
        dist.all_reduce(t)

    assert kinds(simdist.run(kernels)) == ["read-after-write"]
    monkeypatch.setenv("CUDA_LAUNCH_BLOCKING", "1")
    for seed in range(3):
        res = simdist.run(kernels, seed=seed)
        assert kinds(res) == [] and res.returns == [3.0 * (1 << 16)], res.report()
        assert kinds(simdist.run(pinned_d2h, seed=seed)) == ["host-read"]
        res = simdist.run(copy_d2d, seed=seed)
        assert kinds(res) == [] and res.returns == [2.0], res.report()
    with pytest.raises(simdist.UnsupportedOperation, match="CUDA_LAUNCH_BLOCKING=1"):
        simdist.run(collective, world_size=2)
    monkeypatch.setenv("CUDA_LAUNCH_BLOCKING", "0")
    assert kinds(simdist.run(kernels)) == ["read-after-write"]


def test_expandable_segments_split_a_large_block_whose_rest_is_at_least_512_bytes(monkeypatch):
    """Rule: the caching allocator splits a large-pool block only when the rest exceeds 1 MiB, but with
    expandable_segments:True (PYTORCH_CUDA_ALLOC_CONF, https://pytorch.org/docs/stable/notes/cuda.html#optimizing-
    memory-usage-with-pytorch-cuda-alloc-conf, or torch.cuda.memory._set_allocator_settings) a large block splits
    like a small one, when the rest is at least 512 bytes (c10/cuda/CUDACachingAllocator.cpp should_split:
    `if (block->pool->is_small || CUDAAllocatorConfig::expandable_segments()) return remaining >= kMinBlockSize`).
    So a 4.5 MiB and then a 15.2 MiB tensor (the second taking the first's 20 MiB segment's rest, 0.3 MiB over)
    give memory_allocated 20 MiB by default and exactly their sizes with expandable segments: the H200's figures
    (ci/gpu_c_facts.py, docs/gpu/c-series-facts-2026-12-02.json). simdist gave 20 MiB in both."""
    MiB = 1 << 20

    def fn(at_run_time):
        if at_run_time:
            torch.cuda.memory._set_allocator_settings("expandable_segments:True")
        try:
            a = torch.empty(int(4.5 * MiB), dtype=torch.uint8, device="cuda")
            b = torch.empty(int(15.2 * MiB) // 512 * 512, dtype=torch.uint8, device="cuda")
            return torch.cuda.memory_allocated(), a.numel() + b.numel()
        finally:
            if at_run_time:
                torch.cuda.memory._set_allocator_settings("expandable_segments:False")

    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch.cuda._set_allocator_settings is deprecated
        assert simdist.run(fn, args=(False,)).returns == [(20971520, 20656640)]
        assert simdist.run(fn, args=(True,)).returns == [(20656640, 20656640)]
        monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
        assert simdist.run(fn, args=(False,)).returns == [(20656640, 20656640)]


def test_a_device_index_past_device_count_raises_what_torch_raises():
    """A device index past torch.cuda.device_count(): torch raises torch.AcceleratorError "CUDA error: invalid device
    ordinal" for a tensor there, a Stream(device=), set_device, torch.cuda.device, synchronize(i); a RuntimeError
    for current_stream(i) / memory_allocated(i); get_device_properties(i) (and so get_device_name /
    get_device_capability) AssertionError "Invalid device id" (an H200 with one GPU, torch 2.11:
    ci/gpu_c_facts2.py, docs/gpu/c-series-facts-2026-12-02.json run3). simdist raised a plain SimulationError
    (not an AcceleratorError), and get_device_properties(5) returned an H200's properties."""
    def fn():
        out = []
        for f in (lambda: torch.ones(1, device="cuda:1"), lambda: torch.cuda.Stream(device=1),
                  lambda: torch.cuda.set_device(1), lambda: torch.cuda.synchronize(1),
                  lambda: torch.cuda.device(1).__enter__(), lambda: torch.cuda.current_stream(1),
                  lambda: torch.cuda.memory_allocated(1)):
            with pytest.raises(RuntimeError, match="invalid device ordinal") as e:
                f()
            out.append(isinstance(e.value, torch.AcceleratorError) and isinstance(e.value, simdist.SimulationError))
        for f in (torch.cuda.get_device_properties, torch.cuda.get_device_name, torch.cuda.get_device_capability):
            with pytest.raises(AssertionError, match="Invalid device id"):
                f(1)
        return out, torch.cuda.get_device_capability(0), torch.cuda.current_device()
    assert simdist.run(fn, device_count=1).returns == [([True] * 7, (9, 0), 0)]


def test_pytorch_no_cuda_memory_caching_is_refused_by_name(monkeypatch):
    """The CUDA semantics note (memory management): "set PYTORCH_NO_CUDA_MEMORY_CACHING=1 in your environment to
    disable caching". c10/cuda/CUDACachingAllocator.cpp forceUncachedAllocator: the variable set at all (any value)
    sends every allocation to cudaMalloc and every free to cudaFree (uncached_delete), which waits for the device, and
    bypasses the caching allocator's statistics (memory_allocated() stays 0). simdist ignored it: its caching
    allocator's reuse races (which a synchronizing free rules out) and figures were reported. Not modelled, so the
    run is refused by name when CUDA is initialized in a rank."""
    def fn():
        return torch.ones(3, device="cuda").sum().item()
    for value in ("1", "0"):
        monkeypatch.setenv("PYTORCH_NO_CUDA_MEMORY_CACHING", value)
        with pytest.raises(simdist.UnsupportedOperation, match="PYTORCH_NO_CUDA_MEMORY_CACHING"):
            simdist.run(fn)
    monkeypatch.delenv("PYTORCH_NO_CUDA_MEMORY_CACHING")
    assert simdist.run(fn).returns == [3.0]


def test_the_default_streams_cuda_stream_handle_is_the_null_stream():
    """Each device's default stream is CUDA's null stream: `torch.cuda.default_stream(i).cuda_stream` is 0 (the
    cudaStream_t handle; c10/cuda/CUDAStream.cpp: the default stream's stream() is nullptr), a side stream's is a
    non-zero pointer (an H200 with torch 2.11: ci/gpu_c_facts.py default_ids [0, 0, 0], docs/gpu/
    c-series-facts-2026-12-02.json). simdist gave the stream's simulated id (1) for the default stream."""
    def fn():
        side = torch.cuda.Stream()
        return (torch.cuda.default_stream(0).cuda_stream, torch.cuda.default_stream(1).cuda_stream,
                torch.cuda.current_stream().cuda_stream, side.cuda_stream != 0,
                len({side.cuda_stream, torch.cuda.Stream().cuda_stream}),
                "cuda_stream=0x0 " in repr(torch.cuda.current_stream()),  # torch's repr: the handle, in hex
                f"cuda_stream={side.cuda_stream:#x} " in repr(side),
                (torch.cuda.current_stream().native_handle, side.native_handle == side.cuda_stream))
    assert simdist.run(fn, device_count=2).returns == [(0, 0, 0, True, 2, True, True, (0, True))]


def _numpy_gaussians_across_switches():
    import numpy as _np
    import torch.distributed as dist
    dist.init_process_group("nccl")
    k = dist.get_rank()
    torch.cuda.set_device(k)
    t = torch.ones(1, device="cuda")
    if k == 0:
        _np.random.seed(11)
    out = []
    for _ in range(3):
        if k == 0:
            out.append(float(_np.random.randn()))  # the first of a pair leaves the second cached (has_gauss)
        dist.all_reduce(t)
        t.item()  # (each rank waits for the other: the thread transport switches ranks here)
        if k == 1:
            out.append(float(_np.random.randn()))
    return out, _np.random.get_state()[2:]


def test_numpy_global_state_is_each_rank_threads_own_across_switches_cached_gaussians_included():
    """Rule: each torchrun process has its own numpy global RandomState; with ranks as threads simdist swaps it at
    every rank switch, skipping the swap when the MT19937 bytes are equal and no Gaussian is cached (the legacy
    normal draws two values and caches the second: `has_gauss`, consumed by the next draw without changing the
    bytes, numpy/random/mtrand.pyx legacy_gauss). Rank 0 seeds and draws a Gaussian before each switch; rank 1
    never seeds and draws after each switch: each must get what a process of its own gets (rank 1: its own
    unseeded stream, which `processes` gives), never the other's cached value."""
    import numpy as _np
    _np.random.seed(11)
    want0 = [float(_np.random.randn()) for _ in range(3)]
    threads = simdist.run(_numpy_gaussians_across_switches, world_size=2)
    procs = simdist.run(_numpy_gaussians_across_switches, world_size=2, transport="processes")
    assert threads.returns[0][0] == want0
    assert [r[0] for r in threads.returns] == [r[0] for r in procs.returns]
    assert [r[1] for r in threads.returns] == [r[1] for r in procs.returns]  # (pos, has_gauss, gauss) too


def test_each_pending_pinned_h2d_copy_is_checked_against_the_bytes_a_host_write_touches():
    """Rule (CUDA semantics, pinned memory buffers): a non_blocking host-to-device copy from pinned memory reads
    the bytes it copies when it runs, so a host write to them before the host waited for the copy races it; a
    write to other bytes of the same buffer races nothing. simdist kept one pending copy per storage (a second
    copy from another slice replaced the first: a write racing the first was missed while its values were
    damaged) and matched writes by storage (a write to the other half was reported, the values right)."""
    def two_copies():
        buf = torch.arange(2000.).pin_memory()
        s = torch.cuda.Stream()
        big = torch.randn(512, 512, device="cuda")
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            _ = big @ big  # keeps s busy
            g1 = buf[:1000].to("cuda", non_blocking=True)
        g2 = buf[1000:].to("cuda", non_blocking=True)
        torch.cuda.current_stream().synchronize()  # the host waited for g2's copy only
        buf[:1000].fill_(-1.0)  # races g1's copy on s
        torch.cuda.synchronize()
        return g1.sum().item(), g2.sum().item()

    def other_half():
        buf = torch.arange(2000.).pin_memory()
        g = buf[:1000].to("cuda", non_blocking=True)
        buf[1000:].fill_(0)
        buf[1000:] += 1
        torch.cuda.synchronize()
        return g.sum().item()

    res = simdist.run(two_copies)
    assert [h.kind for h in res.hazards] == ["write-after-read"] and "fill_" in res.hazards[0].second.op
    res = simdist.run(other_half)
    assert res.hazards == [] and res.returns == [float(sum(range(1000)))]


def test_non_blocking_copies_through_copy_temporaries_follow_copy_cu():
    """Rule (aten/src/ATen/native/cuda/Copy.cu copy_kernel_cuda): a copy between the host and a device is one
    cudaMemcpyAsync between the two tensors' own bytes when the dtypes agree and both are one contiguous run in the
    same layout; otherwise (copy_requires_temporaries) non_blocking copies go through temporaries. Host to device:
    the memcpy reads `src.expand_as(dst).contiguous()`, the pinned buffer itself only when it is contiguous with
    dst's shape (a cast from a contiguous pinned source reads it late: a race), else a pageable copy made at the
    call (staged: the buffer is free on return). Device to host: the DMA goes into the pinned destination when it is
    contiguous (the host must wait), else into a pageable `empty_like`, which the host waits for (cudaMemcpyAsync
    to pageable memory returns once done). simdist made every non_blocking copy with pinned memory asynchronous: a
    transposed destination read as poison with a host-read hazard; a transposed source copied into a contiguous
    tensor was reported racing the host's next write."""
    def prog():
        out = {}
        p = torch.arange(64.).reshape(8, 8).pin_memory()
        d = torch.empty(8, 8, device="cuda")
        d.copy_(p.t(), non_blocking=True)  # strides differ: a contiguous pageable copy of p.t(), staged
        p.fill_(-1.0)
        torch.cuda.synchronize()
        out["h2d_transposed_into_contiguous"] = torch.equal(d.cpu(), torch.arange(64.).reshape(8, 8).t())
        g = torch.arange(64., device="cuda").reshape(8, 8)
        h = torch.zeros(8, 8, pin_memory=True)
        h.t().copy_(g, non_blocking=True)  # a non-contiguous pinned destination: synchronous
        out["d2h_into_transposed"] = h.sum().item()
        t = torch.arange(64., device="cuda").reshape(8, 8).t()
        c = t.to("cpu", torch.float16, non_blocking=True)  # a cast into a transposed pinned output: synchronous
        out["d2h_cast_transposed"] = (c.is_pinned(), c.float().sum().item())
        return out

    res = simdist.run(prog)
    assert res.hazards == []
    assert res.returns == [{"h2d_transposed_into_contiguous": True, "d2h_into_transposed": 2016.0,
                            "d2h_cast_transposed": (True, 2016.0)}]

    def racy_cast():
        q = torch.arange(64.).pin_memory()
        e = q.to("cuda", torch.float16, non_blocking=True)  # a cast: the DMA reads q itself (contiguous), late
        q.fill_(-1.0)
        torch.cuda.synchronize()
        k = torch.empty(64, dtype=torch.float16, pin_memory=True)
        k.copy_(torch.arange(64., device="cuda"), non_blocking=True)  # a cast into a contiguous pinned buffer
        early = k.float().sum().item()  # (before any wait: the DMA into k may not have run)
        return e.sum().item(), early

    assert sorted(h.kind for h in simdist.run(racy_cast).hazards) == ["host-read", "write-after-read"]


def test_numpy_conversions_of_a_pending_pinned_buffer_are_host_reads():
    """np.asarray(t) / np.array(t) go through Tensor.__array__: numpy drops the watched array subclass (asarray) or
    copies the bytes in C (array), so simdist saw no read of a buffer a non_blocking device-to-host copy had not
    written yet and returned stale bytes silently. The conversion is the read: a host-read hazard; after a
    synchronize it is none."""
    import numpy as _np

    def racy(how):
        buf = torch.zeros(4, pin_memory=True)
        buf.copy_(torch.ones(4, device="cuda") * 7, non_blocking=True)
        v = (_np.asarray if how == "asarray" else _np.array)(buf).tolist()
        torch.cuda.synchronize()
        return v

    def waited():
        buf = torch.zeros(4, pin_memory=True)
        buf.copy_(torch.ones(4, device="cuda") * 7, non_blocking=True)
        torch.cuda.synchronize()
        return _np.asarray(buf).tolist()

    for how in ("asarray", "array"):
        assert [h.kind for h in simdist.run(racy, args=(how,)).hazards] == ["host-read"], how
    res = simdist.run(waited)
    assert res.hazards == [] and res.returns == [[7.0] * 4]


def test_fresh_pinned_memory_is_poison_so_a_racy_read_repeats():
    """torch.empty(..., pin_memory=True) is the caching host allocator's block: its bytes are whatever it held.
    simdist gave the process's uninitialised malloc memory, so a program reading it before its copy landed (a
    reported host-read) returned other values, and another digest, from run to run with one seed. Fresh pinned
    memory is poison (0xFF bytes, NaN for floats), as a fresh device block is; zeros(pin_memory=True) stays zeros."""
    def prog():
        out = torch.empty(256, pin_memory=True)
        out.copy_(torch.randn(256, device="cuda"), non_blocking=True)
        early = out.sum().item()
        torch.cuda.synchronize()
        return early, torch.zeros(3, pin_memory=True).tolist()

    runs = [simdist.run(prog, seed=0) for _ in range(3)]
    assert len({r.digest for r in runs}) == 1
    assert math.isnan(runs[0].returns[0][0]) and runs[0].returns[0][1] == [0.0] * 3


def test_a_stream_from_a_stream_pointer_is_that_stream():
    """torch.cuda.Stream(stream_ptr=p) wraps the cudaStream_t p (torch/csrc/cuda/Stream.cpp THCPStream_pynew:
    getStreamFromExternal), it makes no new stream: work queued on it is ordered with work on the stream p came
    from, and 0 is the default stream. simdist ignored the pointer (a new pool stream: a false race); a pointer no
    simulated stream has is refused by name, as ExternalStream is."""
    def prog():
        s = torch.cuda.Stream()
        s2 = torch.cuda.Stream(stream_ptr=s.cuda_stream)
        a = torch.ones(1 << 12, device="cuda")
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            b = a * 2
        with torch.cuda.stream(s2):
            c = b + 1
        torch.cuda.current_stream().wait_stream(s2)
        try:
            torch.cuda.Stream(stream_ptr=0xdeadbeef)
            foreign = "made"
        except simdist.UnsupportedOperation:
            foreign = "refused"
        return (s2 is s, torch.cuda.Stream(stream_ptr=0) == torch.cuda.default_stream(), c.sum().item(), foreign)

    res = simdist.run(prog)
    assert res.hazards == [] and res.returns == [(True, True, 3.0 * 4096, "refused")]


def test_device_guard_stream_by_id_and_nvml_queries():
    """torch.cuda._DeviceGuard (torch.cuda._exchange_device: makes the device current, gives the previous back)
    and torch.cuda._set_stream_by_id (torch._C._cuda_setStream) work as on a GPU; NVML queries of the physical GPU
    (utilization, temperature, device_memory_used, ...) and the C++ allocator object are refused by name. They
    raised raw AttributeError / "compiled without CUDA" / ModuleNotFoundError."""
    def prog():
        torch.cuda.set_device(0)
        with torch.cuda._DeviceGuard(1):
            inside = torch.cuda.current_device()
        s = torch.cuda.Stream()
        torch.cuda._set_stream_by_id(s.stream_id, s.device_index, s.device_type)
        current = torch.cuda.current_stream() == s
        refused = []
        for f in (torch.cuda.utilization, torch.cuda.device_memory_used, torch.cuda.memory._get_current_allocator):
            try:
                f()
            except simdist.UnsupportedOperation:
                refused.append(f.__name__)
        return inside, torch.cuda.current_device(), current, refused

    assert simdist.run(prog, device_count=2).returns == [
        (1, 0, True, ["utilization", "device_memory_used", "_get_current_allocator"])]


def _only_cuda1():
    return torch.ones(2, device="cuda:1").sum().item()


def test_cuda_lazy_init_makes_no_device_so_the_first_run_repeats():
    """torch's C++ calls torch.cuda._lazy_init once per process (device_lazy_init caches it), at the first CUDA
    tensor of the first run: simdist made the current device there (cuda:0, unused by a program on cuda:1), an
    empty default stream in that run's digest only, so check_determinism failed on a fresh process's first run.
    _lazy_init now marks CUDA initialized without a device. (Run in a fresh process: the lazy init is spent in
    this one.)"""
    code = ("import simdist, tests.test_engine_rules as t; "
            "r = simdist.run(t._only_cuda1, device_count=2, check_determinism=True); print(r.returns)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240,
                         cwd=os.path.join(os.path.dirname(__file__), ".."))
    assert out.returncode == 0 and "[2.0]" in out.stdout, out.stderr[-2000:]
