"""Higher-order operators (torch.cond, torch._higher_order_ops.while_loop / map, flex_attention) run eagerly on
simulated tensors as a GPU's eager mode runs them: through their dense (CompositeExplicitAutograd) kernels, the
kernel's own factories and ops simulated (simdist/faces/dispatch.py _higher_order), a tensor predicate read with
a host synchronization. The values are the same as the same program's on the CPU. What is not modelled (autograd
through control flow, which traces branches into graphs first; flex_attention's autograd with a score_mod) is
refused by name; before, every HOP raised "There was no rule registered for HigherOrderOperator ... and mode
RankMode". Transports beside the process groups (symmetric memory, RPC) are refused by name too."""
import warnings

import pytest
import torch

import simdist
from simdist import UnsupportedOperation


def _prog(dev):
    from torch._higher_order_ops.map import map as hop_map
    from torch._higher_order_ops.while_loop import while_loop
    from torch.nn.attention.flex_attention import flex_attention
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 2, 128, 16, generator=g).to(dev)
    out = [torch.cond(q.sum() > 0, lambda t: t * 2, lambda t: t - 1, (q,)),
           torch.cond(q.sum() > 1e9, lambda t: t * 2, lambda t: t - 1, (q,))]
    out.append(flex_attention(q, q, q, score_mod=lambda s, b, h, i, j: torch.where(i >= j, s, -float("inf"))))
    i, x = while_loop(lambda i, x: i < 5, lambda i, x: (i + 1, x * 2),
                      (torch.zeros((), dtype=torch.int64, device=dev), torch.ones(3, device=dev)))
    out += [i, x, hop_map(lambda a: a * 3 + 1, q[0])]
    return [t.cpu() for t in out]


def test_control_flow_and_flex_attention_give_the_eager_cpu_values():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (flex_attention without torch.compile warns, on a GPU too)
        res = simdist.run(_prog, kwargs={"dev": "cuda"})
        want = _prog("cpu")
    assert not res.hazards, res.report()
    got = res.returns[0]
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert torch.equal(a, b)


@pytest.mark.parametrize("what", ["cond_backward", "flex_score_mod_backward", "symmetric_memory", "rpc"])
def test_what_is_not_modelled_is_refused_by_name(what):
    def prog():
        if what == "cond_backward":
            w = torch.ones(3, device="cuda", requires_grad=True)
            torch.cond(w.sum() > 0, lambda t: (t * t).sum(), lambda t: t.sum(), (w,)).backward()
        elif what == "flex_score_mod_backward":
            from torch.nn.attention.flex_attention import flex_attention
            q = torch.ones(1, 1, 128, 16, device="cuda", requires_grad=True)
            flex_attention(q, q, q, score_mod=lambda s, b, h, i, j: torch.where(i >= j, s, -float("inf")))
        elif what == "symmetric_memory":
            from torch.distributed import _symmetric_memory
            _symmetric_memory.empty(16, device="cuda")
        else:
            torch.distributed.rpc.init_rpc("w0", rank=0, world_size=1)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(UnsupportedOperation, match="not modelled by simdist"):
            simdist.run(prog)
