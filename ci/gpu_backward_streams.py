"""Which streams a backward pass runs on, measured: the same cases on a GPU (torch's real CUDA autograd engine) and
under simdist (torch's engine over simdist's fake device guard). For each case it records which stream is current
inside hooks that run as part of backward ops (tensor hooks run as the pre-hook of the op that made the tensor;
post-accumulate-grad hooks run in the parameter's AccumulateGrad), whether the values are right when one stream is
delayed with torch.cuda._sleep, and (under simdist) the hazards reported.

    python3 ci/gpu_backward_streams.py --out $OUT/backward_streams.json     # on the GPU machine
    python ci/gpu_backward_streams.py --sim                                  # here: simdist's answers, printed

tests/test_backward_streams.py checks simdist's answers against the committed GPU result
(docs/gpu/backward-streams-2026-12-02.json): the same stream in every hook, and a hazard exactly where the GPU's
values were damaged or where the case has no ordering at all.
Rules: https://pytorch.org/docs/stable/notes/cuda.html#stream-semantics-of-backward-passes;
torch/csrc/autograd/engine.cpp (evaluate_function's stream guard, exec_post_processing), input_buffer.cpp.
"""
import argparse
import json
import sys

import torch

N = 1 << 16
SLEEP = 50_000_000  # cycles (tens of ms on an H200): long enough that unordered work runs first


def _dirty():
    """Fill the allocator's cached blocks with NaN, so a read before the write it should follow sees NaN rather
    than what an earlier case left there (simdist poisons fresh memory itself)."""
    junk = [torch.full((N,), float("nan"), device="cuda") for _ in range(64)]
    junk += [torch.full((256, 256), float("nan"), device="cuda") for _ in range(16)]
    del junk


def _label(streams):
    cur = torch.cuda.current_stream()
    for name, s in streams.items():
        if cur == s:
            return name
    return "other"


def branches(sleep):
    """A forward split over streams a and b; each branch's backward runs on its own stream."""
    a, b = torch.cuda.Stream(), torch.cuda.Stream()
    names = {"default": torch.cuda.current_stream(), "a": a, "b": b}
    gen = torch.Generator().manual_seed(0)
    w0 = torch.randn(256, 256, generator=gen)
    x0 = torch.randn(64, 256, generator=gen)
    w = w0.cuda().requires_grad_()
    x = x0.cuda()
    seen = {}
    for s in (a, b):
        s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(a):
        if sleep:
            torch.cuda._sleep(SLEEP)
        ya = torch.tanh(x @ w)
    with torch.cuda.stream(b):
        yb = torch.sigmoid(x @ w.t())
    ya.register_hook(lambda g: seen.__setitem__("hook_a", _label(names)))
    yb.register_hook(lambda g: seen.__setitem__("hook_b", _label(names)))
    w.register_post_accumulate_grad_hook(lambda p: seen.__setitem__("accumulate", _label(names)))
    for s in (a, b):
        torch.cuda.current_stream().wait_stream(s)
    (ya.sum() + (yb * yb).sum()).backward()
    got = w.grad.cpu()
    w0.requires_grad_()
    (torch.tanh(x0 @ w0).sum() + (torch.sigmoid(x0 @ w0.t()) ** 2).sum()).backward()
    seen["values_right"] = bool(torch.allclose(got, w0.grad, rtol=1e-3, atol=1e-3))
    return seen


def _side_forward(sleep, read_on, accumulator_on_default=False, backward_in_side=True):
    s = torch.cuda.Stream()
    names = {"default": torch.cuda.current_stream(), "side": s}
    seen = {}
    w = torch.ones(N, device="cuda", requires_grad=True)
    keep = w * 1 if accumulator_on_default else None  # w's AccumulateGrad made on the default stream, kept alive
    w.register_post_accumulate_grad_hook(lambda p: seen.__setitem__("accumulate", _label(names)))
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        if sleep:
            torch.cuda._sleep(SLEEP)
        y = w * 3
        y.register_hook(lambda g: seen.__setitem__("hook_y", _label(names)))
        loss = y.sum()
    if backward_in_side:
        with torch.cuda.stream(s):
            loss.backward()
    else:
        loss.backward()
    if read_on == "side":
        with torch.cuda.stream(s):
            total = w.grad.sum()
        torch.cuda.current_stream().wait_stream(s)
    else:
        total = w.grad.sum()
    seen["values_right"] = bool(total.item() == 3.0 * N)
    del keep
    return seen


def backward_in_side_read_on_default(sleep):
    """Forward and backward under a side stream's context, grads read on the default stream without a sync (the
    CUDA notes' "Unsafe" example)."""
    return _side_forward(sleep, "default")


def backward_in_side_read_in_side(sleep):
    """The same, grads read in the side stream's context (the notes' "Safe")."""
    return _side_forward(sleep, "side")


def backward_outside_read_in_side(sleep):
    """Forward under a side stream's context, backward() outside it, grads read back in the side stream's context
    (simdist notes 8: the backward ops run on the side stream)."""
    return _side_forward(sleep, "side", backward_in_side=False)


def accumulator_made_on_default(sleep):
    """w's AccumulateGrad was made on the default stream (an earlier graph kept alive), the backward ops run on the
    side stream; grads read on the default stream after backward() in the side context."""
    return _side_forward(sleep, "default", accumulator_on_default=True)


def _initial_grad(sleep, forward_in_side, sync):
    s = torch.cuda.Stream()
    names = {"default": torch.cuda.current_stream(), "side": s}
    seen = {}
    w = torch.ones(N, device="cuda", requires_grad=True)
    s.wait_stream(torch.cuda.current_stream())
    if forward_in_side:
        with torch.cuda.stream(s):
            loss = w * 2
    else:
        loss = w * 2
    loss.register_hook(lambda g: seen.__setitem__("hook_root", _label(names)))
    if sleep:
        torch.cuda._sleep(SLEEP)  # on the default stream: the initial gradient is written late
    initial = torch.full((N,), 0.5, device="cuda")
    if sync:
        s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        loss.backward(gradient=initial)
    torch.cuda.current_stream().wait_stream(s)
    seen["values_right"] = bool(w.grad.sum().item() == float(N))
    return seen


def initial_grad_unsynced_forward_in_side(sleep):
    """Initial gradient written on the default stream, forward and backward() in the side context, no sync."""
    return _initial_grad(sleep, True, False)


def initial_grad_synced_forward_in_side(sleep):
    return _initial_grad(sleep, True, True)


def initial_grad_unsynced_forward_on_default(sleep):
    """Initial gradient and forward on the default stream, backward() in the side context, no sync: the root op's
    backward runs on the default stream, after the initial gradient."""
    return _initial_grad(sleep, False, False)


CASES = [branches, backward_in_side_read_on_default, backward_in_side_read_in_side, backward_outside_read_in_side,
         accumulator_made_on_default, initial_grad_unsynced_forward_in_side, initial_grad_synced_forward_in_side,
         initial_grad_unsynced_forward_on_default]


def gpu(out):
    res = {"torch": torch.__version__, "device": torch.cuda.get_device_name(), "cases": {}}
    for case in CASES:
        _dirty()
        plain = case(False)
        torch.cuda.synchronize()
        _dirty()
        delayed = case(True)
        torch.cuda.synchronize()
        res["cases"][case.__name__] = {"streams": {k: v for k, v in plain.items() if k != "values_right"},
                                       "values_right": plain["values_right"],
                                       "values_right_delayed": delayed["values_right"]}
    with open(out, "w") as f:
        json.dump(res, f, indent=1, sort_keys=True)
    for name, c in res["cases"].items():
        print(f"{name:45s} {c['streams']} right={c['values_right']} delayed_right={c['values_right_delayed']}")


def sim(case, seed=0):
    """simdist's answers for one case: the streams its hooks saw, whether its values were right, the hazards."""
    import simdist
    r = simdist.run(lambda: case(False), seed=seed)
    seen = r.returns[0]
    return {"streams": {k: v for k, v in seen.items() if k != "values_right"},
            "values_right": seen["values_right"], "hazards": sorted({h.kind for h in r.hazards})}


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="backward_streams.json")
    p.add_argument("--sim", action="store_true", help="print simdist's answers (CPU)")
    a = p.parse_args()
    if a.sim:
        import warnings
        warnings.simplefilter("ignore")
        for case in CASES:
            print(f"{case.__name__:45s} {sim(case)}")
    else:
        if not torch.cuda.is_available():
            sys.exit("no GPU: use --sim for simdist's answers")
        gpu(a.out)
