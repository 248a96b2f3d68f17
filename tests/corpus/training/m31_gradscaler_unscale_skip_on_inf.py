"""torch.amp.GradScaler("cuda") on an fp32 model with SGD: with finite gradients the scaled backward, unscale_
(by 1/65536, exact in fp32) and step give the plain CPU step; clip_grad_norm_ after unscale_ sees the true
gradients; an inf gradient makes step() skip the update and update() halve the scale; growth after
growth_interval clean steps doubles it.

EXPECTED: clean
WORLD_SIZE: 1
REASON: torch/amp/grad_scaler.py: scale() multiplies by the scale (init 2**16), unscale_ calls torch._amp_foreach_non_finite_check_and_unscale_ (found_inf per device), step() skips optimizer.step() when found_inf, update() calls torch._amp_update_scale_ (backoff 0.5 on inf, growth 2.0 after growth_interval steps).
"""
import copy

import torch
import torch.nn as nn


def main():
    torch.cuda.set_device(0)
    torch.manual_seed(0)
    ref = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    gpu = copy.deepcopy(ref).cuda()
    opt_ref = torch.optim.SGD(ref.parameters(), lr=0.1)
    opt = torch.optim.SGD(gpu.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cuda", growth_interval=2)
    assert scaler.get_scale() == 65536.0
    for step in range(2):
        x, y = torch.randn(8, 16), torch.randn(8, 4)
        opt_ref.zero_grad()
        nn.functional.mse_loss(ref(x), y).backward()
        n_ref = torch.nn.utils.clip_grad_norm_(ref.parameters(), 0.5)
        opt_ref.step()
        opt.zero_grad()
        scaler.scale(nn.functional.mse_loss(gpu(x.cuda()), y.cuda())).backward()
        scaler.unscale_(opt)
        n = torch.nn.utils.clip_grad_norm_(gpu.parameters(), 0.5)
        assert abs(n.item() - n_ref.item()) < 1e-4 * max(1.0, n_ref.item()), (n.item(), n_ref.item())
        scaler.step(opt)
        scaler.update()
    assert scaler.get_scale() == 131072.0, scaler.get_scale()      # two clean steps: grown once
    for p, q in zip(ref.parameters(), gpu.parameters()):
        assert torch.allclose(p, q.detach().cpu(), rtol=1e-5, atol=1e-6), (p - q.detach().cpu()).abs().max()
    before = [p.detach().clone() for p in gpu.parameters()]
    opt.zero_grad()
    scaler.scale(gpu(torch.randn(8, 16).cuda()).sum()).backward()
    with torch.no_grad():
        gpu[0].weight.grad[0, 0] = float("inf")
    scaler.step(opt)
    scaler.update()
    assert scaler.get_scale() == 65536.0, scaler.get_scale()
    for b, p in zip(before, gpu.parameters()):
        assert torch.equal(b.cpu(), p.detach().cpu())           # the step was skipped


if __name__ == "__main__":
    main()
