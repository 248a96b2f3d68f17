"""torch.optim and clip_grad_norm_ pick their foreach (multi-tensor) kernels for simulated CUDA tensors, as on a GPU.

Rule (torch/optim/optimizer.py `_default_to_fused_or_foreach`, torch/utils/_foreach_utils.py `_has_foreach_support`):
with foreach=None, an optimizer uses the foreach implementation when every parameter is on a device with foreach
kernels (CUDA) and `type(p) in _foreach_supported_types`; clip_grad_norm_ likewise. A simulated CUDA tensor counts
as one, so the same kernels, their order and temporaries are those a GPU runs; the values are those of the
per-parameter loop (they agree bit for bit here). The type lists are put back after the run, keeping what a
library appended during it (DTensor adds itself at import).
"""
import torch
import torch.optim.optimizer as optimizer_module
import torch.utils._foreach_utils as foreach_utils

import simdist


def _train(dev, **kw):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 4))
    m = m.to(dev)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2, **kw)
    x = torch.arange(40.0).view(5, 8).div(40).to(dev)
    for _ in range(3):
        m(x).pow(2).sum().backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 0.5)
        opt.step()
        opt.zero_grad()
    return [p.detach().cpu() for p in m.parameters()]


def test_default_optimizer_takes_the_foreach_kernels_on_simulated_cuda():
    default = simdist.run(lambda: _train("cuda"))
    foreach = simdist.run(lambda: _train("cuda", foreach=True))
    loop = simdist.run(lambda: _train("cuda", foreach=False))
    assert default.digest == foreach.digest != loop.digest
    assert default.ops == foreach.ops < loop.ops
    ref = _train("cpu", foreach=False)
    for got in (default.returns[0], loop.returns[0]):
        assert all(torch.equal(a, b) for a, b in zip(got, ref))


def test_the_type_lists_are_restored():
    before = (list(optimizer_module._foreach_supported_types), list(foreach_utils._foreach_supported_types))
    simdist.run(lambda: _train("cuda"))
    assert (optimizer_module._foreach_supported_types, foreach_utils._foreach_supported_types) == before
