"""g-series rules (notes_engine_bugs.md, `[g-series, documented semantics]`): each test states a rule of torch or its
backends, cites where it is written, and checks simdist against it (against the real gloo backend where one runs
here, in threads of this process)."""
import datetime
import threading
import warnings

import pytest
import torch
import torch.distributed as dist

import simdist


def _real_gloo(world, fn):
    """Run fn(pg, rank) on every rank of a real ProcessGroupGloo (torch's own, over loopback), ranks as threads."""
    store = dist.HashStore()
    out, errs = [None] * world, []

    def body(r):
        try:
            pg = dist.ProcessGroupGloo(store, r, world, datetime.timedelta(seconds=60))
            out[r] = fn(pg, r)
        except BaseException as e:  # noqa: BLE001 - re-raised below
            errs.append(e)

    threads = [threading.Thread(target=body, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errs:
        raise errs[0]
    return out


def _reduce_inputs(r, n, dtype, op):
    g = torch.Generator().manual_seed(1000 * n + 7 * r)
    x = torch.randn(n, generator=g) * 3
    if op == "PRODUCT":
        x = x.abs() * 0.5 + 0.75
    if dtype == torch.int64:
        x = (x * 10).round()
    if dtype == torch.float32 and n > r:
        x[r] = float("nan")  # gloo's std::max keeps its own element's NaN and drops a received one
    return x.to(dtype)


REDUCE_CASES = [(n, dtype, op) for n in (1, 3, 7, 13, 1001) for dtype in (torch.float32, torch.float16, torch.int64)
                for op in ("SUM", "MAX", "MIN", "PRODUCT")] + [(100003, torch.float32, "SUM"),
                                                              (37, torch.float64, "AVG"), (37, torch.bfloat16, "AVG")]


def _same(a, b):
    return a.dtype == b.dtype and torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(7.0),
                                                                                    b.nan_to_num(7.0))


@pytest.mark.parametrize("world", [2, 3, 4])
def test_gloo_reduce_leaves_the_rings_partial_results_in_non_root_buffers(world):
    """ProcessGroupGloo's reduce (torch/csrc/distributed/c10d/ProcessGroupGloo.cpp AsyncReduceWork, torch 2.11 and
    2.13 alike) calls gloo::reduce with the tensor as its only buffer (setOutput, no setInput: "If input buffer is
    not specified, the output is also the input", gloo/reduce.cc). gloo::reduce is a ring reduce-scatter in segments
    (rank r sends to r - 1 and reduces what r + 1 sends into its own buffer), then each rank sends the chunk it holds
    to the root. So after `dist.reduce(t, dst)` on gloo the other ranks' t hold partial reductions (for 3 ranks and a
    small tensor, rank 1 holds x1 + x2, rank 2 its own x2), and the root's sums are associated in the ring's order
    (x0 + (x1 + x2)), not in rank order. AVG (torch >= 2.8) divides every rank's buffer by the group size. simdist
    left the non-root buffers unchanged and summed the root's in rank order (silent wrong values). The reference
    here is the real gloo backend, run in threads of this process."""
    cases = REDUCE_CASES

    def real(pg, r):
        out = []
        for n, dtype, op in cases:
            for root in range(world):
                x = _reduce_inputs(r, n, dtype, op)
                o = dist.ReduceOptions()
                o.rootRank, o.reduceOp = root, getattr(dist.ReduceOp, op)
                pg.reduce([x], o).wait()
                out.append(x)
        return out

    def prog():
        dist.init_process_group("gloo")
        r = dist.get_rank()
        out = []
        for n, dtype, op in cases:
            for root in range(world):
                x = _reduce_inputs(r, n, dtype, op)
                dist.reduce(x, dst=root, op=getattr(dist.ReduceOp, op))
                out.append(x)
        return out

    want = _real_gloo(world, real)
    res = simdist.run(prog, world_size=world)
    assert not res.hazards, res.report()
    changed = 0
    for r in range(world):
        for i, (a, b) in enumerate(zip(res.returns[r], want[r])):
            assert _same(a, b), (r, cases[i // world], i % world)
        changed += sum(not _same(b, _reduce_inputs(r, *cases[i // world])) for i, b in enumerate(want[r])
                       if i % world != r)
    assert changed > 0  # the reference does write non-root buffers (what the rule is about)


ALLREDUCE_CASES = [(n, dtype, op) for n in (1, 5, 37, 1001) for dtype in (torch.float32, torch.float16)
                   for op in ("SUM", "MAX", "PRODUCT")] + [(300007, torch.float32, "SUM"), (37, torch.float64, "AVG"),
                                                          (37, torch.int64, "SUM")]


@pytest.mark.parametrize("world", [3, 4])
def test_gloo_allreduce_and_reduce_scatter_sum_in_the_rings_order(world):
    """ProcessGroupGloo's allreduce runs gloo::allreduce (gloo/allreduce.cc; the ring, its default algorithm): the
    same segmented ring reduce-scatter as gloo::reduce, then an all-gather of the reduced chunks, so from 3 ranks
    on a float sum is associated in the ring's order (x1 + (x2 + x0) ...), not in rank order, and a NaN spreads as
    gloo's `a < b ? b : a` lets it. all_reduce_coalesced flattens its tensors into one buffer and allreduces that
    (AsyncAllreduceCoalescedWork); reduce_scatter_tensor allreduces the whole input and keeps this rank's chunk;
    reduce_scatter of a list allreduces each slot. simdist summed in rank order (silent wrong values in the last
    bits). The reference is the real gloo backend, run in threads of this process."""
    def inputs(r):
        return [_reduce_inputs(r, n, dtype, op) for n, dtype, op in ALLREDUCE_CASES]

    def opts(op, cls=dist.AllreduceOptions):
        o = cls()
        o.reduceOp = getattr(dist.ReduceOp, op)
        return o

    def real(pg, r):
        out = []
        for x, (_n, _dtype, op) in zip(inputs(r), ALLREDUCE_CASES):
            pg.allreduce([x], opts(op)).wait()
            out.append(x)
        xs = [x for x, c in zip(inputs(r), ALLREDUCE_CASES) if c[1] == torch.float32][:4]
        pg.allreduce_coalesced(xs, dist.AllreduceCoalescedOptions()).wait()
        out += xs
        x = _reduce_inputs(r, 3 * 1000 * world, torch.float32, "SUM")
        o = torch.empty(3000)
        pg._reduce_scatter_base(o, x, opts("SUM", dist.ReduceScatterOptions)).wait()
        o2 = torch.empty(3000)
        pg.reduce_scatter([o2], [list(x.chunk(world))], opts("SUM", dist.ReduceScatterOptions)).wait()
        return out + [o, o2]

    def prog():
        dist.init_process_group("gloo")
        r = dist.get_rank()
        out = []
        for x, (_n, _dtype, op) in zip(inputs(r), ALLREDUCE_CASES):
            dist.all_reduce(x, op=getattr(dist.ReduceOp, op))
            out.append(x)
        xs = [x for x, c in zip(inputs(r), ALLREDUCE_CASES) if c[1] == torch.float32][:4]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (all_reduce_coalesced is deprecated)
            dist.all_reduce_coalesced(xs)
        out += xs
        x = _reduce_inputs(r, 3 * 1000 * world, torch.float32, "SUM")
        o = torch.empty(3000)
        dist.reduce_scatter_tensor(o, x)
        o2 = torch.empty(3000)
        dist.reduce_scatter(o2, list(x.chunk(world)))
        return out + [o, o2]

    want = _real_gloo(world, real)
    res = simdist.run(prog, world_size=world)
    assert not res.hazards, res.report()
    for r in range(world):
        for i, (a, b) in enumerate(zip(res.returns[r], want[r])):
            assert _same(a, b), (r, i)
    # the rule matters here: the rank-order sum differs from the ring's for these inputs
    rank_order = sum(_reduce_inputs(r, 1001, torch.float32, "SUM").nan_to_num(0.0) for r in range(world))
    ring = want[0][[c[:3] for c in ALLREDUCE_CASES].index((1001, torch.float32, "SUM"))]
    assert not torch.equal(rank_order, ring.nan_to_num(0.0))


def test_an_async_gloo_reduce_writes_the_non_root_buffers_too():
    """The same rule seen by the host checks of async gloo work (notes c7): a non-root rank's buffer is an output of
    the reduce, so its host read before wait() races the worker; after wait() it holds the ring's partial result."""
    def prog(early):
        dist.init_process_group("gloo")
        r = dist.get_rank()
        t = torch.arange(6.0) + 10 * r
        w = dist.reduce(t, dst=0, async_op=True)
        if r != early:
            w.wait()
        v = t.tolist()
        w.wait()
        return v

    for early in (1, 2):
        res = simdist.run(prog, world_size=3, args=(early,))
        assert [(h.kind, h.first.rank, h.second.rank) for h in res.hazards] == [("host-read", early, early)]
    ok = simdist.run(prog, world_size=3, args=(None,))
    assert not ok.hazards, ok.report()

    def real(pg, r):
        t = torch.arange(6.0) + 10 * r
        o = dist.ReduceOptions()
        o.rootRank = 0
        pg.reduce([t], o).wait()
        return t.tolist()

    assert ok.returns == _real_gloo(3, real)
    assert ok.returns[1] != (torch.arange(6.0) + 10).tolist()


def test_nccl_reduce_writes_only_the_roots_buffer():
    """ProcessGroupNCCL::reduce passes the tensor as both sendbuff and recvbuff of ncclReduce, and NCCL's ncclReduce
    (nccl.h) reads sendbuff on every rank but writes recvbuff only on the root ("recvbuff may be NULL on all calls
    except for root device"): the other ranks' tensors keep their values, and no race is reported for a non-root
    rank's host read after the stream is synchronized. (Measured on 2 GPUs by ci/gpu_g_facts.py nccl_reduce.)"""
    def prog():
        dist.init_process_group("nccl")
        r = dist.get_rank()
        torch.cuda.set_device(r)
        t = torch.arange(6.0, device="cuda") + 10 * r
        dist.reduce(t, dst=1)
        torch.cuda.synchronize()
        return t.tolist()

    res = simdist.run(prog, world_size=3)
    assert not res.hazards, res.report()
    base = torch.arange(6.0)
    assert res.returns == [base.tolist(), (3 * base + 30).tolist(), (base + 20).tolist()]


def _future_prog(how):
    """An async gloo all_reduce whose future user code waits in one of the ways torch offers; `how` ends in
    ":late" when the host scales the input (and reads the output) before that wait, a race with the worker."""
    dist.init_process_group("gloo")
    r = dist.get_rank()
    t = torch.ones(64) * (r + 1)
    fut = dist.all_reduce(t, async_op=True).get_future()
    way, _, late = how.partition(":")
    seen = []
    if late:
        t.mul_(10)  # BUG: the worker may not have read t yet
    if way == "wait":
        fut.wait()
    elif way == "value":
        fut.value()
    elif way == "done":
        assert fut.done()
    elif way == "wait_all":
        torch.futures.wait_all([fut])
    elif way == "collect_all":
        torch.futures.collect_all([fut]).wait()
    elif way == "then":
        fut.then(lambda f: seen.append(f.value()[0].sum().item())).wait()
    elif way == "then_only":  # the callback is ordered after the work; the host that registered it is not
        fut.then(lambda f: seen.append(f.value()[0].sum().item()))
    v = t[0].item()
    fut.wait()
    return v, seen


FUTURE_WAYS = ["wait", "value", "done", "wait_all", "collect_all", "then"]


@pytest.mark.parametrize("how", FUTURE_WAYS)
def test_a_gloo_future_ends_the_host_watch_when_the_host_observes_it(how):
    """An async gloo collective's future (ProcessGroupGloo createFutureAsOutput: a CPU future of the outputs) is
    completed by the worker thread when the work is done (AsyncWork::finishWorkGloo); the host knows the work is
    done when it waits the future (ivalue::Future::wait blocks on the completion), reads a value it could only read
    once complete (value(), done() True), waits it among others (torch.futures.wait_all / collect_all), or in a
    then() callback, which runs after the completion. Before that, a host write of the input or read of the output
    races the worker (as with Work.wait, notes c7). simdist ended the watch when get_future() was called: every
    `t.mul_(...)` between get_future() and the wait was a missed race (notes L17)."""
    ok = simdist.run(_future_prog, world_size=2, args=(how,))
    assert not ok.hazards, ok.report()
    assert [v for v, _ in ok.returns] == [3.0, 3.0]
    late = simdist.run(_future_prog, world_size=2, args=(how + ":late",))
    assert {h.kind for h in late.hazards} >= {"write-after-read"}, (how, late.report())


def test_a_then_callback_is_ordered_after_the_gloo_work_but_the_host_that_registered_it_is_not():
    """A then() callback runs after the work completes (on the worker thread, or inline when it is already done):
    its read of the output is ordered; the host that registered it and reads on without waiting is not."""
    res = simdist.run(_future_prog, world_size=2, args=("then_only",))
    assert [h.kind for h in res.hazards] == ["host-read"], res.report()
    assert [s for _, s in res.returns] == [[192.0], [192.0]]


def _ddp_gloo(hook, backend):
    import torch.nn as nn
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP
    dist.init_process_group(backend)
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)), bucket_cap_mb=0.0001)
    if hook == "allreduce":
        model.register_comm_hook(None, default_hooks.allreduce_hook)
    elif hook == "fp16":
        model.register_comm_hook(None, default_hooks.fp16_compress_hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(dist.get_rank())
    for _ in range(3):
        loss = model(torch.randn(5, 8, generator=g)).square().sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("hook", [None, "allreduce", "fp16"])
@pytest.mark.parametrize("backend", ["cpu:gloo,cuda:nccl"])  # (plain "gloo": DDP's Logger fails, notes g4)
def test_ddp_on_gloo_waits_its_futures_in_cpp_and_reports_nothing(hook, backend):
    """torch DDP's C++ Reducer takes each bucket's future during the backward pass (Work::getFuture, or a comm
    hook's future) and waits it in C++ (reducer.cpp finalize_backward: `bucket.future_work->wait()`), where simdist
    cannot see the wait: a future taken during a backward pass ends its host watch at once, so DDP on gloo stays
    free of false races; the replicas stay equal."""
    res = simdist.run(_ddp_gloo, world_size=2, args=(hook, backend))
    assert not res.hazards, res.report()
    for a, b in zip(*res.returns):
        assert torch.equal(a, b)


def _peer_copy_prog(how, non_blocking):
    """cuda:0's current stream writes x; x is copied to cuda:1 (as `how`); a side stream of cuda:1 then reads the
    copy without waiting for cuda:1's current stream."""
    x = torch.arange(1 << 12, dtype=torch.float32, device="cuda:0") * 2      # a kernel on cuda:0's current stream
    if how == "to":
        y = x.to("cuda:1", non_blocking=non_blocking)                         # one cudaMemcpyAsync (memcpy_eligible)
    elif how == "cast":
        y = x.to("cuda:1", dtype=torch.float64, non_blocking=non_blocking)    # a cast: a copy kernel on cuda:0
    else:
        y = torch.empty(64, 64, device="cuda:1").t()
        y.copy_(x.view(64, 64), non_blocking=non_blocking)                   # strides differ: a copy kernel
    side = torch.cuda.Stream(device=1)
    with torch.cuda.stream(side):
        z = y.sum()                                                           # no wait on cuda:1's current stream
    torch.cuda.synchronize(1)
    return z.item()


@pytest.mark.parametrize("non_blocking", [False, True])
def test_a_cross_device_copy_kernel_blocks_the_host_under_cuda_launch_blocking(monkeypatch, non_blocking):
    """aten/src/ATen/native/cuda/Copy.cu copy_device_to_device: a cross-device copy runs on the source device's
    current stream after it waits for an event of the destination's current stream, and the destination's current
    stream then waits for an event recorded after the copy; non_blocking plays no part. The copy is one
    cudaMemcpyAsync when `memcpy_eligible` (same dtype, conj and neg bits, and iter.is_contiguous()), else a copy
    kernel on the source device (direct_copy_kernel_cuda / the cast, with peer access). Under CUDA_LAUNCH_BLOCKING=1
    a kernel launch returns when the kernel has run (notes c3, measured on an H200), so a cast or re-strided copy
    to cuda:1 has completed when the call returns, and a side stream of cuda:1 that reads it later is ordered
    through the host. simdist did not make the cross-device copy block (a false read-after-write, notes c3's open
    part). Whether the runtime blocks the memcpy-eligible peer cudaMemcpyAsync is not known (unmeasured:
    ci/gpu_g_facts.py peer_copy): simdist leaves it asynchronous, so that case still reports the race."""
    for how in ("to", "cast", "strided"):
        res = simdist.run(_peer_copy_prog, args=(how, non_blocking), device_count=2)
        assert [h.kind for h in res.hazards] == ["read-after-write"], (how, res.report())
    monkeypatch.setenv("CUDA_LAUNCH_BLOCKING", "1")
    want = float(sum(range(1 << 12)) * 2)
    for how in ("cast", "strided"):
        res = simdist.run(_peer_copy_prog, args=(how, non_blocking), device_count=2)
        assert not res.hazards and res.returns == [want], (how, res.report())
    res = simdist.run(_peer_copy_prog, args=("to", non_blocking), device_count=2)
    assert [h.kind for h in res.hazards] == ["read-after-write"], res.report()


def test_a_cross_device_copy_waits_for_the_destinations_current_stream_and_orders_it_after():
    """The two-way barrier of copy_device_to_device: cuda:1's current stream reading the old destination before the
    copy, and reading the new one after it, needs no wait of the program's own."""
    def prog():
        dst = torch.full((256,), 5.0, device="cuda:1")
        torch.cuda.set_device(1)
        before = dst.sum()                                   # cuda:1's current stream reads dst
        torch.cuda.set_device(0)
        src = torch.ones(256, device="cuda:0")
        dst.copy_(src)                                       # waits for cuda:1's current stream first
        torch.cuda.set_device(1)
        after = dst * 3                                      # ordered after the copy
        torch.cuda.synchronize(1)
        return before.item(), after.sum().item()

    res = simdist.run(prog, device_count=2)
    assert not res.hazards, res.report()
    assert res.returns == [(1280.0, 768.0)]


def test_stream_ids_are_the_ones_a_gpu_gives_and_name_their_streams_back():
    """c10/cuda/CUDAStream.cpp (torch 2.11 and 2.13): makeStreamId gives the default stream 0 and a pool stream
    `(index << (kStreamTypeBits + 1)) | (type << 1) | 1` with kStreamTypeBits 4, its index its place in the pool
    (32 per priority level, handed out round-robin: get_idx) and its type the level + 1 (getStreamFromPool:
    pri_idx = min(-priority, max_stream_priorities - 1), 4 levels on an H200). Measured on an H200 (torch 2.11,
    ci/gpu_c_facts.py default_ids, notes c9): default_stream().stream_id 0, the first side stream's 3. simdist gave
    its own ids (1, 2, ... per rank), so `stream_id == 0` never named the default stream, and
    torch.cuda.Stream(stream_id=..., device_index=..., device_type=...) / torch.Stream(...) took those ids;
    equality and hashing of streams are by identity of the stream, as before."""
    def prog():
        r = dist.get_rank() if dist.is_initialized() else 0
        out = {}
        for dev in (0, 1):
            with torch.cuda.device(dev):
                d = torch.cuda.default_stream()
                pool = [torch.cuda.Stream() for _ in range(33)]
                hi, top = torch.cuda.Stream(priority=-1), torch.cuda.Stream(priority=-7)
                acc = torch.accelerator.current_stream()
                streams = [d, *pool[:2], hi, top]
                back = [torch.cuda.Stream(stream_id=s.stream_id, device_index=dev, device_type=1) for s in streams]
                generic = [torch.Stream(stream_id=s.stream_id, device_index=dev, device_type=1) for s in streams]
                keyed = {s: i for i, s in enumerate(streams)}
                out[dev] = ([s.stream_id for s in streams], pool[32].stream_id, pool[32] is pool[0], acc.stream_id,
                            all(b is s for b, s in zip(back, streams)),
                            all(g._sim is s for g, s in zip(generic, streams)),
                            [keyed[b] for b in back], len({hash(s) for s in streams}))
        return r, out

    res = simdist.run(prog, device_count=2)
    want = ([0, 3, 35, 5, 9], 3, True, 0, True, True, [0, 1, 2, 3, 4], 5)
    assert res.returns == [(0, {0: want, 1: want})]


def _expandable_prog():
    """Offsets (MiB, from the first block) of a sequence of large blocks, as expandable segments place them."""
    MiB = 1 << 20
    a = torch.empty(int(4.5 * MiB), dtype=torch.uint8, device="cuda")  # maps one 20 MiB page: a, free 15.5
    b = torch.empty(16 * MiB, dtype=torch.uint8, device="cuda")         # no free block fits: the free 15.5 grows
    c = torch.empty(30 * MiB, dtype=torch.uint8, device="cuda")         # likewise, from b's rest
    base = a.data_ptr()
    offs = [(t.data_ptr() - base) / MiB for t in (a, b, c)]
    del b                                                               # free 16 MiB at 4.5; tail free 9.5 at 50.5
    f = torch.empty(9 * MiB, dtype=torch.uint8, device="cuda")          # fits both: the tail counts as growable
    offs.append((f.data_ptr() - base) / MiB)
    f.fill_(1)
    c.fill_(1)
    del f, c                                                            # [4.5, 60) free, one block
    torch.cuda.empty_cache()                                            # its whole pages [20, 60) are unmapped
    g = torch.empty(60 * MiB, dtype=torch.uint8, device="cuda")         # the free 15.5 at 4.5 grows by 3 pages
    offs.append((g.data_ptr() - base) / MiB)
    fresh = g.view(torch.float32)[10 * MiB:10 * MiB + 4]                # at 44.5 MiB: a page mapped again
    return offs, torch.cuda.memory_allocated(), bool(torch.isnan(fresh).all().item())


def test_expandable_segments_grow_the_streams_segment_instead_of_making_new_ones(monkeypatch):
    """c10/cuda/CUDACachingAllocator.cpp with expandable_segments:True (torch 2.11 and 2.13): alloc_block calls
    try_allocate_expandable_block instead of cudaMalloc: find_expandable_block takes the lowest unmapped range of the
    stream's one segment of address space, with the free block just before it when there is one
    (`if (allocatable(c->prev)) c = c->prev`), map_block maps whole pages (kLargeBuffer, 20 MiB, in the large pool)
    and merges them with that block; get_free_block's best fit counts a block followed by unmapped space as the size
    it can grow to (`expandable_size`), so another block that fits is taken before it; release_cached_blocks unmaps
    every free block's whole pages (unmap_block). simdist made a new segment (a cudaMalloc of segment_size) wherever
    no free block fitted, so the blocks, their addresses and the bytes a new tensor starts with were the default
    allocator's. Offsets here are what the source gives, and what an H200 gave (torch 2.11, ci/gpu_g_facts.py
    `expandable`, docs/gpu-g-facts-2026-12-04.md)."""
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    res = simdist.run(_expandable_prog)
    offs, allocated, fresh_poison = res.returns[0]
    assert offs == [0.0, 4.5, 20.5, 4.5, 4.5], offs
    assert allocated == int(4.5 * (1 << 20)) + 60 * (1 << 20)
    assert fresh_poison  # pages mapped again hold no earlier tensor's bytes
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:False")
    offs, _, _ = simdist.run(_expandable_prog).returns[0]
    assert offs[:4] != [0.0, 4.5, 20.5, 4.5]  # the default allocator's segments (the rule is about the setting)
