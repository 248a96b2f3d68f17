"""Dynamic loss scaling step by step (torch.amp.GradScaler with init_scale 1024, growth_interval 2): an inf
gradient skips the step and halves the scale, two clean steps double it again; unscale_ then
clip_grad_norm_(foreach=True) acts on true gradients; the parameters and the scale sequence equal plain-python
math of the same rules.

EXPECTED: clean
WORLD_SIZE: 1
REASON: torch/amp/grad_scaler.py (unscale_: _amp_foreach_non_finite_check_and_unscale_, step skipped when found_inf, update: _amp_update_scale_ backoff 0.5 / growth 2.0 after growth_interval clean steps); torch/nn/utils/clip_grad.py clip_grad_norm_ (foreach=True).
"""
import torch


def main():
    torch.cuda.set_device(0)
    p = torch.nn.Parameter(torch.ones(4, device="cuda"))
    opt = torch.optim.SGD([p], lr=0.1)
    scaler = torch.amp.GradScaler("cuda", init_scale=1024.0, growth_factor=2.0, backoff_factor=0.5,
                                  growth_interval=2)
    coef = [torch.tensor([1.0, 2.0, 3.0, 4.0]), torch.tensor([1.0, float("inf"), 1.0, 1.0]),
            torch.tensor([0.5, 0.5, 0.5, 0.5]), torch.tensor([3.0, 0.0, 4.0, 0.0])]
    scales, expect_p, expect_scales = [], torch.ones(4, dtype=torch.float64), []
    scale, good = 1024.0, 0
    for c in coef:
        loss = (p * c.cuda()).sum()
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        norm = torch.nn.utils.clip_grad_norm_([p], max_norm=1.0, foreach=True)
        scaler.step(opt)
        scaler.update()
        scales.append(scaler.get_scale())
        # the same rules in plain python
        g = c.double()
        if torch.isfinite(g).all():
            n = g.norm().item()
            assert abs(norm.item() - n) < 1e-5 * max(1.0, n)
            expect_p -= 0.1 * g * min(1.0, 1.0 / (n + 1e-6))
            good += 1
            if good == 2:
                scale, good = scale * 2.0, 0
        else:
            scale, good = scale * 0.5, 0
        expect_scales.append(scale)
    assert scales == expect_scales, (scales, expect_scales)
    assert torch.allclose(p.detach().cpu().double(), expect_p, rtol=1e-5, atol=1e-6), (p, expect_p)


if __name__ == "__main__":
    main()
