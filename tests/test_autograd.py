"""Autograd on simulated CUDA tensors (simdist/guard.py, docs/autograd.md).

Each test states the rule it checks and where the rule comes from. Values are compared bit for bit with
eager CPU torch: simdist runs the same CPU kernels, only in virtual time.
"""
import copy
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.distributed as dist
import torch.nn as nn

import simdist
from simdist.faces import guard

needs_guard = pytest.mark.skipif(not guard.available(), reason=f"autograd unavailable: {guard.reason()}")

def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def _data():
    g = torch.Generator().manual_seed(1)
    return torch.randn(5, 8, generator=g), torch.randint(0, 4, (5,), generator=g)


def _train(model, opt_cls, opt_kw, x, y, steps, device):
    model = copy.deepcopy(model).to(device)
    opt = opt_cls(model.parameters(), **opt_kw)
    x, y = x.to(device), y.to(device)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return [p.detach() for p in model.parameters()], [p.grad for p in model.parameters()], losses


def _eager(opt_cls, opt_kw, steps=3):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # simdist runs ranks with one intra-op thread
    try:
        return _train(_mlp(), opt_cls, opt_kw, *_data(), steps, "cpu")
    finally:
        torch.set_num_threads(threads)


@needs_guard
@pytest.mark.parametrize("opt_cls,opt_kw", [(torch.optim.SGD, {"lr": 0.1, "momentum": 0.9}),
                                            (torch.optim.Adam, {"lr": 0.01})], ids=["sgd", "adam"])
def test_mlp_training_matches_eager_cpu_bit_for_bit(opt_cls, opt_kw):
    """Rule: a simulated device computes what the real one would; here the reference is eager CPU torch
    (same kernels). nn.Module.cuda(), loss.backward(), .grad and optimizer.step() as in any PyTorch loop
    (https://pytorch.org/docs/stable/optim.html)."""
    model, (x, y) = _mlp(), _data()

    def fn():
        assert torch.is_grad_enabled()  # torch's default in a fresh thread
        params, grads, losses = _train(model, opt_cls, opt_kw, x, y, 3, "cuda")
        assert all(p.device == torch.device("cuda", 0) for p in params + grads)
        return params, grads, losses

    res = simdist.run(fn)
    assert not res.hazards
    ref = _eager(opt_cls, opt_kw)
    got = res.returns[0]
    for a, b in zip(got, ref):
        for t, r in zip(a, b):
            assert torch.equal(t, r)


@needs_guard
def test_requires_grad_on_factories_parameters_and_copies():
    """Rule: requires_grad=True on factories, requires_grad_(), nn.Parameter and a differentiable
    host-to-device copy behave as in torch (https://pytorch.org/docs/stable/notes/autograd.html)."""
    def fn():
        a = torch.ones(3, device="cuda", requires_grad=True)
        b = torch.tensor([1.0, 2.0, 3.0], device="cuda", requires_grad=True)
        c = torch.zeros(3, device="cuda").requires_grad_()
        lin = nn.Linear(3, 2).cuda()
        host = torch.arange(3.0, requires_grad=True)
        moved = host.cuda()  # not a leaf: ToCopyBackward0 takes the gradient back to the host
        assert a.is_leaf and b.is_leaf and c.is_leaf and not moved.is_leaf and moved.requires_grad
        assert all(p.requires_grad and p.is_leaf for p in lin.parameters())
        (a * b + c * 2 + moved * b).sum().backward()
        lin(torch.ones(3, device="cuda")).sum().backward()
        assert host.grad.device.type == "cpu"
        return a.grad, b.grad, c.grad, host.grad, lin.weight.grad, lin.bias.grad

    res = simdist.run(fn)
    ag, bg, cg, hg, wg, biasg = res.returns[0]
    assert torch.equal(ag, torch.tensor([1.0, 2.0, 3.0]))
    assert torch.equal(bg, torch.ones(3) + torch.arange(3.0))
    assert torch.equal(cg, torch.full((3,), 2.0))
    assert torch.equal(hg, torch.tensor([1.0, 2.0, 3.0]))
    assert torch.equal(wg, torch.ones(2, 3)) and torch.equal(biasg, torch.ones(2))


@needs_guard
def test_grad_accumulates_and_autograd_grad_with_create_graph():
    """Rule: backward() accumulates into .grad; torch.autograd.grad returns gradients without touching .grad
    and create_graph=True makes them differentiable (https://pytorch.org/docs/stable/autograd.html)."""
    def fn():
        x = torch.tensor([1.0, 2.0, 3.0], device="cuda", requires_grad=True)
        (x * x).sum().backward()
        (x * 3).sum().backward()
        acc = x.grad.clone()
        (g,) = torch.autograd.grad((x ** 3).sum(), x, create_graph=True)  # 3x^2
        (gg,) = torch.autograd.grad(g.sum(), x)  # 6x
        w = torch.arange(6.0, device="cuda").requires_grad_()
        w[1:3].sum().backward()
        w[torch.tensor([0, 0, 5], device="cuda")].sum().backward()
        return acc, g.detach(), gg, x.grad, w.grad

    acc, g, gg, xg, wg = simdist.run(fn).returns[0]
    x = torch.tensor([1.0, 2.0, 3.0])
    assert torch.equal(acc, 2 * x + 3) and torch.equal(xg, acc)
    assert torch.equal(g, 3 * x * x) and torch.equal(gg, 6 * x)
    assert torch.equal(wg, torch.tensor([2.0, 1.0, 1.0, 0.0, 0.0, 1.0]))


@needs_guard
def test_data_parallel_gradients_all_reduced_match_eager():
    """Rule: averaging per-rank gradients with all_reduce equals the gradient of the mean loss over the
    whole batch (data parallelism, https://pytorch.org/tutorials/intermediate/ddp_tutorial.html)."""
    model, (x, y) = _mlp(), _data()
    x, y = x[:4], y[:4]

    def fn():
        dist.init_process_group("nccl")
        r, w = dist.get_rank(), dist.get_world_size()
        m = copy.deepcopy(model).cuda()
        xs, ys = x.chunk(w)[r].cuda(), y.chunk(w)[r].cuda()
        nn.functional.cross_entropy(m(xs), ys).backward()
        for p in m.parameters():
            dist.all_reduce(p.grad)
            p.grad.div_(w)
        dist.destroy_process_group()
        return [p.grad for p in m.parameters()]

    res = simdist.run(fn, world_size=2)
    assert not res.hazards
    ref = copy.deepcopy(model)
    nn.functional.cross_entropy(ref(x), y).backward()
    for r in range(2):
        for g, p in zip(res.returns[r], ref.parameters()):
            torch.testing.assert_close(g, p.grad, rtol=1e-6, atol=1e-7)  # the sum order differs from eager


def _backward_on_side_stream(use):
    def fn():
        cur = torch.cuda.current_stream()
        side = torch.cuda.Stream()
        w = torch.ones(1 << 14, device="cuda", requires_grad=True)
        side.wait_stream(cur)
        with torch.cuda.stream(side):
            loss = (w * 3).sum()
            loss.backward()
            if use == "same_context":
                return (w.grad * 1).sum().item()
        if use == "wait_stream":
            cur.wait_stream(side)
        return (w.grad * 1).sum().item()
    return fn


@needs_guard
@pytest.mark.parametrize("seed", range(3))
def test_grads_used_outside_backward_stream_without_sync_is_a_hazard(seed):
    """Rule (PyTorch, "Stream semantics of backward passes", the "Unsafe" example): a backward call has the
    stream semantics of any op on the stream current when it is called; using the grads on another stream
    without synchronization is a race. 
    https://pytorch.org/docs/stable/notes/cuda.html#stream-semantics-of-backward-passes"""
    res = simdist.run(_backward_on_side_stream("none"), seed=seed)
    assert res.hazards, res.report()
    assert any("mul" in (h.second.op or "") or "mul" in (h.first.op or "") for h in res.hazards), res.report()


@needs_guard
@pytest.mark.parametrize("use", ["same_context", "wait_stream"])
def test_grads_used_in_backward_stream_or_after_wait_stream_are_clean(use):
    """Rule (same doc section, the two "Safe" examples): grads used in the same stream context as backward(),
    or after current_stream().wait_stream(s), are ordered after the backward pass. 
    https://pytorch.org/docs/stable/notes/cuda.html#stream-semantics-of-backward-passes"""
    for seed in range(3):
        res = simdist.run(_backward_on_side_stream(use), seed=seed)
        assert not res.hazards, res.report()
        assert res.returns[0] == 3.0 * (1 << 14)


@needs_guard
def test_initial_gradient_from_another_stream_needs_sync():
    """Rule (same doc section): populating the initial gradient and invoking backward in different stream
    contexts without synchronization is unsafe; s.wait_stream(current) makes it safe. The engine treats the
    initial gradient as made on the stream current at the call (engine.cpp execute: the root's InputBuffer::add
    with the caller's stream as producer) and joins it to the root op's forward stream: here the forward ran on
    `side` too, so an initial gradient written on the default stream without a sync is read unordered.
    https://pytorch.org/docs/stable/notes/cuda.html#stream-semantics-of-backward-passes"""
    def prog(sync):
        def fn():
            side = torch.cuda.Stream()
            w = torch.ones(1 << 14, device="cuda", requires_grad=True)
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                loss = w * 2
            initial = torch.full_like(w, 0.5)  # written on the current stream, after side's wait
            if sync:
                side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                loss.backward(gradient=initial)
            torch.cuda.current_stream().wait_stream(side)
            return w.grad.sum().item()
        return fn
    assert simdist.run(prog(False)).hazards
    res = simdist.run(prog(True))
    assert not res.hazards, res.report()
    assert res.returns[0] == float(1 << 14)


@needs_guard
def test_initial_gradient_on_the_root_ops_own_stream_needs_no_sync():
    """Rule (engine.cpp execute, input_buffer.cpp): the root op's backward runs on the stream its forward ran on.
    An initial gradient written on that same stream is ordered before it even when backward() is called in
    another stream context (the engine makes the root op's stream wait for the caller's, never the reverse), and
    the caller's stream then waits for the leaf streams (exec_post_processing)."""
    def fn():
        side = torch.cuda.Stream()
        w = torch.ones(1 << 14, device="cuda", requires_grad=True)
        loss = w * 2  # forward on the default stream
        side.wait_stream(torch.cuda.current_stream())
        initial = torch.full_like(loss, 0.5)  # also on the default stream, after side's wait
        with torch.cuda.stream(side):
            loss.backward(gradient=initial)
        torch.cuda.current_stream().wait_stream(side)
        return w.grad.sum().item()
    res = simdist.run(fn)
    assert not res.hazards, res.report()
    assert res.returns[0] == float(1 << 14)


@needs_guard
def test_forward_on_side_stream_backward_on_default_is_clean_in_pytorch():
    """Rule (same doc section): "Each backward CUDA op runs on the same stream that was used for its
    corresponding forward op", with internal syncs, so a forward entirely on `side` followed by backward()
    on the default stream is safe in PyTorch: the backward ops run on `side` after the forward work, and the
    calling stream waits for the leaf streams at the end (engine.cpp exec_post_processing).
    https://pytorch.org/docs/stable/notes/cuda.html#stream-semantics-of-backward-passes"""
    def fn():
        side = torch.cuda.Stream()
        w = torch.ones(1 << 14, device="cuda", requires_grad=True)
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            loss = (w * w).sum()
        loss.backward()
        return w.grad.sum().item()
    assert not simdist.run(fn).hazards


@needs_guard
def test_backward_ops_run_on_their_forward_ops_streams():
    """Rule (same doc section): "Each backward CUDA op runs on the same stream that was used for its
    corresponding forward op." A forward split over two streams (two branches, as a model with parallel
    streams) runs each branch's backward on that branch's stream: a hook on a branch's output, which runs as the
    pre-hook of the op that made it (engine.cpp evaluate_function: the node's stream guard is set first), sees
    that stream current; the joins between the branches are the engine's own events, so values are eager CPU's
    and nothing races. torch/csrc/autograd/engine.cpp, input_buffer.cpp."""
    def fn():
        torch.manual_seed(0)
        a, b = torch.cuda.Stream(), torch.cuda.Stream()
        w = torch.randn(64, 64).cuda().requires_grad_()
        x = torch.randn(8, 64).cuda()
        seen = {}
        for s in (a, b):
            s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(a):
            ya = torch.tanh(x @ w)
        with torch.cuda.stream(b):
            yb = torch.sigmoid(x @ w.t())
        ya.register_hook(lambda g: seen.__setitem__("a", torch.cuda.current_stream()))
        yb.register_hook(lambda g: seen.__setitem__("b", torch.cuda.current_stream()))
        for s in (a, b):
            torch.cuda.current_stream().wait_stream(s)
        (ya.sum() + (yb * yb).sum()).backward()
        return seen["a"] == a, seen["b"] == b, w.grad.cpu()
    res = simdist.run(fn)
    assert not res.hazards, res.report()
    on_a, on_b, grad = res.returns[0]
    assert on_a and on_b
    torch.manual_seed(0)
    w = torch.randn(64, 64, requires_grad=True)
    x = torch.randn(8, 64)
    (torch.tanh(x @ w).sum() + (torch.sigmoid(x @ w.t()) ** 2).sum()).backward()
    assert torch.equal(grad, w.grad)


@needs_guard
def test_grads_read_back_on_the_forward_stream_after_backward_elsewhere_are_clean():
    """Rule (same doc section; simdist notes 8): with the forward under a side-stream context and backward()
    outside it, the gradients are produced on the side stream, so reading them back on the side stream needs no
    sync (simdist used to run the whole backward on the calling stream and report this as a race)."""
    def fn():
        gpu = nn.Sequential(nn.Linear(64, 128), nn.Tanh(), nn.Linear(128, 8)).cuda()
        xd = torch.randn(32, 64).cuda()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            loss = gpu(xd).pow(2).sum()
        loss.backward()
        with torch.cuda.stream(s):
            total = sum(p.grad.sum() for p in gpu.parameters())
        torch.cuda.current_stream().wait_stream(s)
        return total.item()
    res = simdist.run(fn)
    assert not res.hazards, res.report()


def _grad_freed_then_reused(accumulator_on_default):
    n = 1 << 14

    def fn():
        s = torch.cuda.Stream()
        w = torch.ones(n, device="cuda", requires_grad=True)
        keep = w * 1 if accumulator_on_default else None  # noqa: F841  (w's AccumulateGrad made on the default stream)
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            loss = (w * 2).sum()
            loss.backward()
        y = w.grad.sum()  # on the default stream
        w.grad = None  # the gradient's block (allocated on s) goes back to the allocator
        with torch.cuda.stream(s):
            z = sum(torch.full((n,), 7.0, device="cuda") for _ in range(4))
        torch.cuda.current_stream().wait_stream(s)
        return y.item(), z.sum().item()
    return fn


@needs_guard
def test_a_gradient_accumulated_on_another_stream_is_record_streamed():
    """Rule (torch/csrc/autograd/input_buffer.cpp InputBuffer::add, record_stream_any_impl): a gradient produced on
    one stream and consumed on another (here w's AccumulateGrad, made on the default stream by an earlier forward
    whose graph is alive, while the backward ops ran on `s`) is record_stream'ed on the consumer's stream, so the
    caching allocator does not hand its block to new work on `s` while the default stream may still read it
    (c10/cuda/CUDACachingAllocator.cpp recordStream). Without the record_stream simdist would report a
    reuse-after-free a GPU does not have."""
    res = simdist.run(_grad_freed_then_reused(True))
    assert not res.hazards, res.report()
    assert res.returns[0] == (2.0 * (1 << 14), 28.0 * (1 << 14))


@needs_guard
def test_grads_made_on_a_side_stream_read_on_the_default_stream_race():
    """Rule (same doc section, "Unsafe": backward() in a side-stream context, grads used outside it without a
    sync): with the forward on `s` too, w's AccumulateGrad runs on `s`, the default stream reads w.grad with
    nothing ordering it after: a read-after-write."""
    res = simdist.run(_grad_freed_then_reused(False))
    assert "read-after-write" in [h.kind for h in res.hazards], res.report()


@needs_guard
def test_backward_is_deterministic():
    """Rule: a run is a pure function of (program, world size, seed, policy) (simdist's determinism
    contract, DESIGN.md), autograd included: the engine runs every node on the rank thread."""
    model, (x, y) = _mlp(), _data()

    def fn():
        return _train(model, torch.optim.SGD, {"lr": 0.1}, x, y, 2, "cuda")[0]

    simdist.run(fn, world_size=2, check_determinism=True)


_PROBE = textwrap.dedent("""
    import sys, torch
    if sys.argv[1] != "plain":
        import simdist
        assert simdist.faces.guard.available() == (sys.argv[1] == "simdist"), simdist.faces.guard.reason()
    def probe():
        out = []
        for f in (lambda: torch.empty(1, device="cuda"), lambda: torch.Event("cuda"),
                  lambda: torch.zeros(2).to("cuda"), lambda: torch.accelerator.current_accelerator(),
                  lambda: torch._C._get_accelerator(), lambda: torch.ones(2, requires_grad=True).sum().backward()):
            try:
                out.append(("ok", repr(f())))
            except Exception as e:
                out.append((type(e).__name__, str(e).splitlines()[0]))
        return out
    print(probe())
    if sys.argv[1] != "plain":
        simdist.run(lambda: torch.ones(2, device="cuda").sum().item())
        print(probe())
        print(simdist.faces.guard.enabled())
""")


@needs_guard
def test_torch_outside_a_run_is_as_before():
    """Rule: simdist leaves torch as it was outside a run (simdist/patches.py). The fake CUDA guard is in
    torch's registry only while a run is installed: in a fresh process, torch.empty(device="cuda"),
    torch.Event("cuda") and the accelerator queries answer as without simdist, before and after a run."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))

    def run(mode, **extra):
        return subprocess.run([sys.executable, "-c", _PROBE, mode], capture_output=True, text=True,
                              env=dict(env, **extra), check=True).stdout.splitlines()

    plain, sim, noguard = run("plain"), run("simdist"), run("noguard", SIMDIST_NO_AUTOGRAD="1")
    assert sim[0] == plain[0] == noguard[0], (plain, sim, noguard)
    assert "PyTorch is not linked with support for cuda devices" in plain[0]
    # after a run the answers are those of simdist without the guard (a run has always left torch.cuda's
    # lazy-init state behind, which changes torch.empty(device="cuda")'s message; not this change)
    assert sim[1] == noguard[1], (sim, noguard)
    assert sim[2] == "False"


def test_without_guard_autograd_is_refused():
    """Rule: where the fake guard cannot be built (no compiler, SIMDIST_NO_AUTOGRAD=1), simdist warns and
    refuses autograd on simulated tensors with UnsupportedOperation instead of letting the process abort."""
    code = textwrap.dedent("""
        import torch, simdist
        assert not simdist.faces.guard.available()
        def fn():
            assert not torch.is_grad_enabled()
            w = torch.ones(2, device="cuda").requires_grad_()
            assert not w.requires_grad
            try:
                w.sum().backward()
            except simdist.UnsupportedOperation as e:
                return str(e)
        print(simdist.run(fn).returns[0])
    """)
    env = dict(os.environ, SIMDIST_NO_AUTOGRAD="1", PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert "SIMDIST_NO_AUTOGRAD" in out.stdout or "built with CUDA" in out.stdout  # the reason, named


def test_guard_library_named_by_its_source(tmp_path, monkeypatch):
    """The guard's library has one name per source text in torch's extensions cache: two simdist versions on one
    machine (a benchmark of an earlier commit next to this tree) rebuilt each other's library under one name, and
    a process loading the other's ran without the guard (CUDA futures then order the current stream at
    get_future(), so races behind them go unreported: seen on the corpus's future programs)."""
    here = guard._name()
    assert here.startswith("simdist_fake_cuda_guard_") and here == guard._name()
    other = tmp_path / "fake_cuda_guard.cpp"
    other.write_text(open(guard._SOURCE).read() + "\n// another version\n")
    monkeypatch.setattr(guard, "_SOURCE", str(other))
    assert guard._name() != here


@needs_guard
@pytest.mark.parametrize("forward_on_side", [False, True])
def test_an_exception_from_a_hook_reaches_the_program(forward_on_side):
    """Rule: an exception raised in a tensor hook propagates out of backward() to the caller (torch/csrc/autograd/
    python_hook.cpp), also when the node ran on another stream than the caller's: the engine restores its stream
    while the exception unwinds, and the fake guard's callbacks then run with the Python error still pending
    (csrc/fake_cuda_guard.cpp preserving_error; before, the run died with SystemError)."""
    def fn():
        w = torch.ones(8, device="cuda", requires_grad=True)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side if forward_on_side else torch.cuda.current_stream()):
            y = w * 2

        def boom(g):
            raise ValueError("from the hook")
        y.register_hook(boom)
        try:
            y.sum().backward()
        except ValueError as e:
            return str(e)
        return None
    assert simdist.run(fn).returns == ["from the hook"]


@needs_guard
def test_backward_hooks_run_on_their_nodes_device():
    """Rule (torch/csrc/autograd/engine.cpp evaluate_function: the node's stream guard also makes its device
    current while the node and its pre-hooks run, and restores the caller's after): with the forward on cuda:1 and
    backward() called with cuda:0 current, a hook of a cuda:1 tensor sees cuda:1 as the current device and its
    stream, tensors it makes land there, and the caller's device is current again afterwards."""
    def fn():
        torch.cuda.set_device(1)
        w = torch.ones(8, device="cuda", requires_grad=True)
        y = w * 2
        seen = {}

        def hook(g):
            seen["device"] = torch.cuda.current_device()
            seen["stream_device"] = torch.cuda.current_stream().device_index
            seen["new"] = str(torch.empty(1, device="cuda").device)
        y.register_hook(hook)
        torch.cuda.set_device(0)
        y.sum().backward()
        return seen, torch.cuda.current_device(), w.grad.sum().item()
    res = simdist.run(fn, device_count=2)
    assert not res.hazards, res.report()
    assert res.returns[0] == ({"device": 1, "stream_device": 1, "new": "cuda:1"}, 0, 16.0)


@needs_guard
def test_cuda_futures_freed_by_the_collector_after_a_run_do_not_abort():
    """Rule: destroying a CUDA ivalue::Future destroys its events under `c10::OptionalDeviceGuard(event.device())`
    (ATen/core/ivalue_inl.h ~Future), which asks torch's registry for the CUDA guard. torch DDP's Reducer keeps one
    Future per bucket, so a DDP model in a reference cycle (any transformers model) is destroyed whenever the
    collector runs; simdist pauses the collector for a run and its fake guard leaves the registry at the end, so
    the collector's next pass after the run aborted the process (notes b2). The run's cyclic garbage is now collected
    while the guard is still in (simdist/faces/patches.py _collect_run_garbage), and while events recorded in a run
    live the guard stays in torch's registry (csrc/fake_cuda_guard.cpp g_live_events): the process lives on."""
    code = textwrap.dedent("""
        import gc, torch, torch.distributed as dist, simdist
        def prog():
            dist.init_process_group("nccl")
            w = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 4).cuda())
            w.myself = [w]
            w(torch.randn(2, 4, device="cuda")).sum().backward()
        res = simdist.run(prog, world_size=2)
        gc.collect()
        print("alive", len(res.hazards), simdist.faces.guard.draining())
        kept = []
        def keep():
            dist.init_process_group("nccl")
            w = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 4).cuda())
            w(torch.randn(2, 4, device="cuda")).sum().backward()
            kept.append(w)
        simdist.run(keep, world_size=2)
        print("kept", simdist.faces.guard.draining())
        kept.clear()
        gc.collect()
        try:
            torch.Event("cuda")
        except Exception as e:
            print("after", simdist.faces.guard.draining(), str(e).splitlines()[0])
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    # and a Future that outlives the run (the model kept by the caller): the guard stays in the registry, draining,
    # until the last event made in the run is destroyed, then torch is as before (torch.Event("cuda") refused)
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr[-2000:])
    assert r.stdout.splitlines() == ["alive 0 False", "kept True",
                                     "after False PyTorch is not linked with support for cuda devices"], r.stdout
