"""torch.inference_mode() on simulated tensors computes what it computes on the CPU.

Under inference mode the Autograd and ADInplaceOrView keys are excluded (c10/core/InferenceMode.h), so
CompositeImplicitAutograd ops (aten.to.dtype for `t.bool()`, linear, matmul, layer_norm, ...) reach the dispatch
mode as themselves instead of as their decompositions; simdist ran each as one CPU kernel whose result was not in
simulated memory, so `torch.triu(t, 1).bool()` read poison (all True) with a negative storage offset: a silent
wrong value (Megatron's inference engine's causal mask, transformer/utils.py get_default_causal_mask). They now run
as their decompositions, as FakeTensorMode runs them. A view of a tensor made outside inference mode is an ordinary
tensor (views keep their base's kind); simdist's wrapper was made as an inference tensor, and autograd's view
bookkeeping raised "Cannot set version_counter for inference tensor" at every `w.t()`."""
import torch
import torch.nn.functional as F

import simdist


def _program(dev):
    g = torch.Generator().manual_seed(0)
    w = torch.randn(8, 16, generator=g).to(dev)       # made outside inference mode
    x0 = torch.randn(4, 16, generator=g).to(dev)
    out = {}
    with torch.inference_mode():
        x = x0 * 1.0
        wt = w.t()
        out["views_not_inference"] = torch.tensor([wt.is_inference(), w[0].is_inference(), w.view(-1).is_inference()])
        out["linear"] = F.linear(x, w)
        out["matmul"] = x @ wt
        mask = torch.triu(torch.ones(4, 4, device=dev), diagonal=1).bool()
        out["mask"] = mask
        out["mask_int"] = torch.triu(torch.ones(4, 4, device=dev), 1).int()
        scores = (x @ x.t()).masked_fill(mask, float("-inf"))
        out["softmax"] = torch.softmax(scores, dim=-1)
        out["layer_norm"] = F.layer_norm(x, (16,))
        out["half"] = x.half().float()
        out["zeros_bool"] = torch.zeros(2, 2, device=dev).bool()
        out["embedding"] = F.embedding(torch.tensor([1, 3, 0], device=dev), w)
        out["reshape_cat"] = torch.cat([x.reshape(8, 8), w[:, :8]])
    return {k: v.cpu() for k, v in out.items()}


def test_inference_mode_values_are_the_cpus():
    res = simdist.run(_program, kwargs={"dev": "cuda"})
    want = _program("cpu")
    got = res.returns[0]
    assert not res.hazards, res.report()
    assert got.keys() == want.keys()
    for k in want:
        assert got[k].dtype == want[k].dtype and torch.equal(got[k], want[k]), k
    assert not got["views_not_inference"].any()
