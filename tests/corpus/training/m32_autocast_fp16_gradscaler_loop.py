"""The AMP recipe of the docs (autocast(device_type="cuda", dtype=torch.float16) + GradScaler) on a small MLP for
a few steps: the loss is computed in fp16 matmuls, the parameters stay fp32 with fp32 grads, the loss decreases,
and the final parameters are close to an fp32 CPU run (fp16 rounding only).

EXPECTED: clean
WORLD_SIZE: 1
REASON: https://pytorch.org/docs/stable/notes/amp_examples.html (typical mixed precision training); autocast runs linear in float16 (cuda autocast op list), GradScaler keeps fp32 master params.
"""
import copy

import torch
import torch.nn as nn


def main():
    torch.cuda.set_device(0)
    torch.manual_seed(0)
    ref = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 1))
    gpu = copy.deepcopy(ref).cuda()
    opt_ref = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    opt = torch.optim.AdamW(gpu.parameters(), lr=1e-2)
    scaler = torch.amp.GradScaler("cuda")
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(64, 32, generator=g), torch.randn(64, 1, generator=g)
    losses = []
    for _ in range(5):
        opt_ref.zero_grad()
        nn.functional.mse_loss(ref(x), y).backward()
        opt_ref.step()
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type="cuda", dtype=torch.float16):
            out = gpu(x.cuda())
            assert out.dtype == torch.float16
            loss = nn.functional.mse_loss(out.float(), y.cuda())
        scaler.scale(loss).backward()
        assert gpu[0].weight.grad.dtype == torch.float32
        scaler.step(opt)
        scaler.update()
        losses.append(loss.item())
    assert losses[-1] < losses[0], losses
    for p, q in zip(ref.parameters(), gpu.parameters()):
        assert q.dtype == torch.float32
        assert (p - q.detach().cpu()).abs().max() < 5e-3, (p - q.detach().cpu()).abs().max()


if __name__ == "__main__":
    main()
