"""clip_grad_norm_(error_if_nonfinite=True) on a CUDA model whose loss overflowed: the total norm is inf, and the
check (a host read of a device scalar) raises RuntimeError naming the non-finite norm, instead of silently
scaling every gradient by zero.

EXPECTED: error
ERROR: RuntimeError
WORLD_SIZE: 1
REASON: torch/nn/utils/clip_grad.py _clip_grads_with_norm_ / clip_grad_norm_: `if error_if_nonfinite and torch.logical_or(total_norm.isnan(), total_norm.isinf()): raise RuntimeError(f"The total norm of order {norm_type} for gradients from `parameters` is non-finite, so it cannot be clipped. ...")`.
"""
import torch
import torch.nn as nn


def main():
    torch.cuda.set_device(0)
    m = nn.Linear(8, 1).cuda()
    x = torch.full((4, 8), 1e30, device="cuda")
    (m(x) * 1e30).sum().backward()
    torch.nn.utils.clip_grad_norm_(m.parameters(), max_norm=1.0, error_if_nonfinite=True, foreach=True)


if __name__ == "__main__":
    main()
