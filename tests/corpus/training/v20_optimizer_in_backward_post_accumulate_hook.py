"""Optimizer-in-backward, as torchtune's `optimizer_in_bwd` recipes do (torchtune/training/memory.py
register_optim_in_bwd_hooks: one optimizer per parameter, stepped and zeroed from
Tensor.register_post_accumulate_grad_hook, so a gradient is freed as soon as it is used): three AdamW steps give
the parameters of a plain CPU loop with one AdamW over all parameters, and no gradient outlives its hook.

EXPECTED: clean
WORLD_SIZE: 1
REASON: torch/_tensor.py register_post_accumulate_grad_hook (runs after the gradient is accumulated into .grad, on the backward's stream); torchtune/training/memory.py register_optim_in_bwd_hooks / OptimizerInBackwardWrapper; https://pytorch.org/tutorials/intermediate/optimizer_step_in_backward_tutorial.html.
"""
import copy

import torch
import torch.nn as nn


def main():
    torch.cuda.set_device(0)
    torch.manual_seed(0)
    ref = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 8))
    gpu = copy.deepcopy(ref).cuda()
    opt_ref = torch.optim.AdamW(ref.parameters(), lr=1e-2, weight_decay=0.1)
    optim_dict = {p: torch.optim.AdamW([p], lr=1e-2, weight_decay=0.1) for p in gpu.parameters()}
    stepped = []

    def hook(p):
        optim_dict[p].step()
        optim_dict[p].zero_grad(set_to_none=True)
        stepped.append(p)

    for p in gpu.parameters():
        p.register_post_accumulate_grad_hook(hook)
    for _ in range(3):
        x, y = torch.randn(16, 32), torch.randn(16, 8)
        stepped.clear()
        nn.functional.mse_loss(gpu(x.cuda()), y.cuda()).backward()
        assert len(stepped) == len(optim_dict) and all(p.grad is None for p in gpu.parameters())
        opt_ref.zero_grad()
        nn.functional.mse_loss(ref(x), y).backward()
        opt_ref.step()
    for p, q in zip(ref.parameters(), gpu.parameters()):
        assert torch.allclose(p, q.detach().cpu(), rtol=1e-5, atol=1e-6), (p - q.detach().cpu()).abs().max()


if __name__ == "__main__":
    main()
