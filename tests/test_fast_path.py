"""The per-op fast path (simdist/faces/dispatch.py _fast_functional, engine launch_kernel) is an optimisation only:
the rule is that a run with it gives what the same run gives through the general path (_functional, launch):
same digest (schedule, op log, report sites, values), same returns, same hazards, same allocator statistics,
and the same tensors (metadata, strides, storage offset, data pointers)."""
import pytest
import torch

import simdist
from simdist.faces import dispatch


class _NoFastSpecs(dict):
    """_FAST_SPECS that never keeps a layout: every op takes the general path."""

    def __setitem__(self, key, value):
        pass


def _program():
    side = torch.cuda.Stream()
    x = torch.arange(64, dtype=torch.float32, device="cuda")
    i = torch.ones(8, dtype=torch.int64, device="cuda")
    outs = []
    for k in range(40):
        x = x * 1.5 + 1.0
        y = x - 2
        i = i + 1  # an int tensor and an int scalar
        m = torch.maximum(x, y)  # two tensor arguments
        t = x.view(8, 8).t()
        u = t + 0.5  # a non-contiguous argument
        e = torch.empty(0, device="cuda") + 1.0  # an empty tensor
        if k % 10 == 0:
            outs.append((m.sum().item(), u.stride(), u.storage_offset(), u.data_ptr() - x.data_ptr(), e.shape,
                         u.requires_grad, str(u.device), u.dtype, i.dtype))
    with torch.cuda.stream(side):
        z = x + 1.0  # reads x on the side stream with no wait: a race
    w = z * 2.0
    torch.cuda.synchronize()
    return (outs, w.sum().item(), i.sum().item(), torch.cuda.memory_allocated(), torch.cuda.max_memory_allocated(),
            torch.cuda.memory_reserved())


def _summary(res):
    return (res.digest, res.returns, [(h.kind, h.first.op, h.second.op, h.count, h.observed) for h in res.hazards])


@pytest.mark.parametrize("seed", [0, 1])
def test_the_fast_path_gives_what_the_general_path_gives(monkeypatch, seed):
    fast = simdist.run(_program, seed=seed)
    taken = len(dispatch._FAST_SPECS)
    monkeypatch.setattr(dispatch, "_FAST_SPECS", _NoFastSpecs())
    general = simdist.run(_program, seed=seed)
    assert taken  # the first run did take the fast path
    assert fast.hazards  # and the program does race
    assert _summary(fast) == _summary(general)


def test_a_fast_path_tensor_is_what_the_general_path_makes():
    def prog():
        x = torch.ones(16, device="cuda")
        a = x + 1.0  # the general path (the spec cache learns the layout)
        b = x + 1.0  # the fast path
        return [(t.shape, t.stride(), t.storage_offset(), t.dtype, str(t.device), t.requires_grad, t.is_leaf,
                 t.is_contiguous(), sorted(vars(t)), t._span[1] - t._span[0], t._span[2], t._spec, type(t).__name__)
                for t in (a, b)]
    a, b = simdist.run(prog).returns[0]
    assert a == b


def test_empty_like_of_a_contiguous_tensor_takes_the_meta_kernels_layout():
    """torch.empty_like(x) with preserve_format (ATen empty_like: a non-overlapping and dense input's own strides,
    else suggest_memory_format's) takes its layout without the meta reference when x has contiguous strides
    (simdist/faces/rules/factories.py): the same shape, strides and dtype as the meta kernel gives, for 0-d, empty,
    size-1 and ordinary shapes, a dtype override and a non-contiguous input (which keeps the general path)."""
    shapes = [(), (0,), (3,), (4, 1), (1, 4), (2, 0, 3), (5, 6, 7), (1, 1)]

    def fn():
        out = []
        for sh in shapes:
            x = torch.ones(sh, device="cuda")
            for kw in ({}, {"dtype": torch.bfloat16}, {"memory_format": torch.preserve_format}):
                y = torch.empty_like(x, **kw)
                out.append((tuple(y.shape), tuple(y.stride()), y.dtype, y.device.type))
        t = torch.ones(4, 6, device="cuda").t()
        y = torch.empty_like(t)
        out.append((tuple(y.shape), tuple(y.stride()), y.dtype, y.device.type))
        return out

    want = []
    for sh in shapes:
        x = torch.ones(sh, device="meta")
        for kw in ({}, {"dtype": torch.bfloat16}, {"memory_format": torch.preserve_format}):
            y = torch.empty_like(x, **kw)
            want.append((tuple(y.shape), tuple(y.stride()), y.dtype, "cuda"))
    y = torch.empty_like(torch.ones(4, 6, device="meta").t())
    want.append((tuple(y.shape), tuple(y.stride()), y.dtype, "cuda"))
    assert simdist.run(fn).returns[0] == want
