"""CUDA futures and torch's generic events, as torch's own C++ code handles them (simdist/faces/guard_events.py).

Rules (torch/include/ATen/core/ivalue_inl.h, `c10::ivalue::Future` with CUDA devices; "CUDA semantics" for
torch.futures in torch/futures/__init__.py's docstrings; ProcessGroupNCCL's WorkNCCL::getFuture):
- a Work's future completes at once with an event recorded on the collective's stream; `fut.wait()` makes the
  caller's current stream wait for it (synchronizeWithCurrentStreams), `fut.value()` alone does not;
- a `then()` callback runs with a pool stream current that first waits for the parent's events; the child future
  records its events on that stream, so whoever waits the child is ordered after the callback and the collective;
- torch DDP's C++ Reducer waits its buckets' futures in finalize_backward, so the same ordering reaches it;
- `torch.Event` records on, and waits into, `torch.accelerator.current_stream()`, the rank's current stream.
These need simdist's fake CUDA guard (CPU builds of torch); elsewhere get_future orders the current stream at once.
"""
import pytest
import torch
import torch.distributed as dist

import simdist
from simdist.faces import guard

pytestmark = pytest.mark.skipif(not guard.available(), reason=f"needs simdist's fake CUDA guard: {guard.reason()}")


def _all_reduced(how):
    x = torch.full((1 << 16,), float(dist.get_rank() + 1), device="cuda")
    fut = dist.all_reduce(x, async_op=True).get_future()
    if how == "wait":
        fut.wait()
        return (x * 1).sum().item()
    if how == "value":
        return (fut.value()[0] * 1).sum().item()
    child = fut.then(lambda f: f.value()[0] * 2)
    if how == "then-wait":
        child.wait()
    return (child.value() * 1).sum().item()


@pytest.mark.parametrize("how,racy", [("wait", False), ("value", True), ("then-wait", False), ("then", True)])
def test_a_work_future_orders_only_where_it_is_waited(how, racy):
    for seed in range(3):
        res = simdist.run(_all_reduced, world_size=2, args=(how,), seed=seed)
        assert bool(res.hazards) == racy, res.report()
        if not racy:
            assert res.returns == [(2 if how == "then-wait" else 1) * 3.0 * (1 << 16)] * 2
        else:
            assert {h.kind for h in res.hazards} == {"read-after-write"}


def _then_callback_stream():
    x = torch.ones(8, device="cuda")
    seen = []
    fut = dist.all_reduce(x, async_op=True).get_future()
    child = fut.then(lambda f: seen.append(torch.cuda.current_stream()) or f.value()[0])
    child.wait()
    later = [torch.cuda.Stream() for _ in range(32)]
    return seen[0] != torch.cuda.current_stream(), later[-1] == seen[0], seen[0].name


def test_a_then_callback_runs_on_a_stream_of_the_devices_pool():
    """Rule (ivalue_inl.h invokeCallback: getStreamFromGlobalPool; c10/cuda/CUDAStream.cpp: one round-robin pool of
    32 streams per priority per device, the pool torch.cuda.Stream() takes from): the callback runs on a pool stream,
    not the current one, and the 32nd torch.cuda.Stream() after it is that stream again. The choice is per rank and
    device, so a program's digest is the same at every run in one process and in rank processes (it was one counter
    for the whole process: another run's callbacks moved it)."""
    res = simdist.run(_then_callback_stream, world_size=2, check_determinism=True)
    assert [r[:2] for r in res.returns] == [(True, True), (True, True)]
    again = simdist.run(_then_callback_stream, world_size=2)
    assert again.digest == res.digest and again.returns == res.returns


def _generic_event(wait):
    side = torch.cuda.Stream()
    x = torch.ones(1 << 16, device="cuda")
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        y = x * 2
        ev = torch.Event(device="cuda")
        ev.record()  # on torch.accelerator.current_stream(): the side stream
    if wait:
        ev.wait(torch.accelerator.current_stream())
    z = y + 1  # on the default stream: ordered after the side stream's kernel only by the wait
    ev.synchronize()  # the host waits for the event (and, through it, for y)
    return z.sum().item(), ev.query()


@pytest.mark.parametrize("wait", [True, False])
def test_torch_event_orders_the_accelerator_streams(wait):
    res = simdist.run(_generic_event, args=(wait,))
    assert res.returns == [(3.0 * (1 << 16), True)]
    assert bool(res.hazards) == (not wait), res.report()
