"""torch.func transforms on CUDA tensors as the per-sample-gradient recipe uses them (Opacus's functorch grad
sampler, the torch.func tutorial): `vmap(grad(loss_of_params), in_dims=(None, None, 0, 0))` over
`torch.func.functional_call` of an MLP, then `jacrev`, `jvp` (forward mode), `hessian` and forward-mode dual
tensors; every result equals the same transforms on the CPU, and the per-sample gradients summed equal the
batch gradient from .backward().

EXPECTED: clean
WORLD_SIZE: 1
MODELLED ON: https://pytorch.org/tutorials/intermediate/per_sample_grads.html (functional_call, grad, vmap with
in_dims=(None, None, 0, 0)); opacus/grad_sample/functorch.py (prepare_layer: vmap(grad(compute_loss_stateless_model)));
https://pytorch.org/docs/stable/func.api.html (jacrev, jvp, hessian), torch.autograd.forward_ad.
REASON: torch.func transforms are functionalized dispatch over ordinary ATen ops (batching rules, dual tensors),
so on a GPU they run the same kernels on the current stream as the eager ops, and compute what the CPU does.
"""
import torch
import torch.autograd.forward_ad as fwAD
import torch.nn as nn
from torch.func import functional_call, grad, hessian, jacrev, jvp, vmap


def results(dev):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3)).to(dev)
    x, y = torch.randn(5, 6).to(dev), torch.randint(0, 3, (5,)).to(dev)
    params = {k: v.detach() for k, v in model.named_parameters()}
    buffers = {k: v.detach() for k, v in model.named_buffers()}

    def loss(p, b, xi, yi):
        out = functional_call(model, (p, b), (xi.unsqueeze(0),))
        return nn.functional.cross_entropy(out, yi.unsqueeze(0))

    per_sample = vmap(grad(loss), in_dims=(None, None, 0, 0))(params, buffers, x, y)
    nn.functional.cross_entropy(model(x), y, reduction="sum").backward()
    batch = {k: p.grad for k, p in model.named_parameters()}

    f = lambda v: (v.sin() * v.exp()).sum()  # noqa: E731
    v = torch.linspace(-1, 1, 4).to(dev)
    jac = jacrev(lambda w: functional_call(model, {**params, "2.weight": w}, (x,)))(params["2.weight"])
    _, tangent = jvp(torch.tanh, (v,), (torch.ones_like(v),))
    with fwAD.dual_level():
        dual = fwAD.make_dual(v, torch.full_like(v, 2.0))
        fw = fwAD.unpack_dual(torch.sigmoid(dual) * dual).tangent
    return ({k: t.cpu() for k, t in per_sample.items()}, {k: t.cpu() for k, t in batch.items()},
            jac.cpu(), tangent.cpu(), hessian(f)(v).cpu(), fw.cpu())


def main():
    torch.cuda.set_device(0)
    got, want = results("cuda"), results("cpu")
    ps, batch = got[0], got[1]
    assert ps["0.weight"].shape == (5, 8, 6)
    for k in ps:
        assert torch.allclose(ps[k], want[0][k], atol=1e-5), k
        assert torch.allclose(ps[k].sum(0), batch[k], atol=1e-5), k  # per-sample grads add up to the batch grad
    for a, b in zip(got[2:], want[2:]):
        assert torch.allclose(a, b, atol=1e-5), (a - b).abs().max()
    print("torch.func on cuda equals the CPU: per-sample grads", {k: tuple(v.shape) for k, v in ps.items()})


if __name__ == "__main__":
    main()
