"""The differential tier (issue 12, deliverable 3): programs of tensor ops run on simulated CUDA and eagerly on
the CPU must give identical values, bit for bit (simdist.properties.differential).

The property draws straight-line programs (views, in-place ops on views, `.data`, storage tricks, dtype casts,
Module.to/cuda, optimizer steps, host <-> device copies...); the fixed tests below are the programs of the bugs
the tier found, each stating the rule it checks and where the rule comes from. Every comparison is exact: the
same CPU kernels run on both sides, on one intra-op thread each.
"""
import torch

from simdist.properties import differential as D
from simdist.properties.differential import snap


def both(prog):
    """prog(dev) under simdist ("cuda") and eagerly ("cpu"): no exception, no hazard, identical outputs."""
    got, want = D.run_both(prog)
    if isinstance(got, BaseException):
        raise got
    assert not got.hazards, got.hazards[0]
    d = D.first_difference(got.returns[0], want)
    assert d is None, f"out{d[0]}: simulated {d[1]!r} vs eager {d[2]!r}"
    return got.returns[0]


# --- regressions: each a bug the tier found -----------------------------------------------------------------------
def test_pow_of_a_bool_tensor_by_a_bool_stays_bool():
    # torch.result_type(bool tensor, True) is bool, and the CPU and CUDA kernels return bool (ATen Pow.cpp; measured
    # on an H200 with torch 2.11: ones(3, dtype=bool, device="cuda").pow(True).dtype is torch.bool); torch's meta
    # kernel says int64, and simdist takes output dtypes from meta kernels. Twice: the fast path caches the spec.
    def prog(dev):
        b = torch.tensor([True, False, True], device=dev)
        out = []
        for _ in range(2):
            for r in (b.pow(True), b.pow(False), b ** 2, b.pow(True) ** True):
                out.append((r.dtype, snap(r)))
        return out

    assert [d for d, _ in both(prog)[:4]] == [torch.bool, torch.bool, torch.int64, torch.bool]


def test_nonzero_and_argwhere_are_column_major():
    # ATen nonzero (CPU and CUDA) fills an (ndim, n) buffer and returns its transpose: strides (1, n); measured on an
    # H200 with torch 2.11: ones(6, 2, device="cuda").nonzero().stride() == (1, 12). simdist allocated the result
    # row-major, so `.view(-1)` worked there and raised on a GPU.
    def prog(dev):
        x = torch.tensor([[1., 0.], [2., 3.], [0., 4.]], device=dev)
        n, a = x.nonzero(), torch.argwhere(x)
        try:
            n.view(-1)
            viewed = True
        except RuntimeError:
            viewed = False
        return [n.stride(), a.stride(), snap(n), snap(a), viewed, x[x > 1].stride()]

    out = both(prog)
    assert out[0] == (1, 4) and out[4] is False
