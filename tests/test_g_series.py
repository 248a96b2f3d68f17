"""g-series rules (notes_engine_bugs.md, `[g-series, documented semantics]`): each test states a rule of torch or its
backends, cites where it is written, and checks simdist against it (against the real gloo backend where one runs
here, in threads of this process)."""
import datetime
import threading

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
