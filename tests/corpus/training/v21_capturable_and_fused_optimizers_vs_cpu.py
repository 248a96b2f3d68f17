"""Device-side optimizer state, as CUDA-graph-ready training sets it up: Adam(capturable=True) with a tensor
learning rate (its step counts live on the GPU, no host sync per step), AdamW(fused=True, amsgrad=True), and
SGD(foreach=True, momentum, nesterov); four steps of each equal the same optimizer's for-loop implementation on
the CPU, and capturable's step count is a device tensor.

EXPECTED: clean
WORLD_SIZE: 1
REASON: torch/optim/adam.py _single_tensor_adam / _multi_tensor_adam (capturable: step on the params' device, bias corrections as tensors), torch/optim/_functional fused AdamW (_fused_adamw_), torch/optim/sgd.py _multi_tensor_sgd; https://pytorch.org/docs/stable/optim.html (foreach, fused, capturable).
"""
import torch


def run(make, device, grads):
    torch.manual_seed(0)
    p = torch.nn.Parameter(torch.randn(257, 3).to(device))     # the same start on both (CPU generator)
    opt = make([p])
    for g in grads:
        p.grad = g.to(device)
        opt.step()
    return p.detach().cpu(), opt


def main():
    torch.cuda.set_device(0)
    torch.manual_seed(1)
    grads = [torch.randn(257, 3) for _ in range(4)]
    cases = {
        "adam_capturable": (lambda ps: torch.optim.Adam(ps, lr=torch.tensor(0.01, device="cuda"), capturable=True),
                            lambda ps: torch.optim.Adam(ps, lr=0.01, foreach=False)),
        "adamw_fused_amsgrad": (lambda ps: torch.optim.AdamW(ps, lr=0.02, amsgrad=True, fused=True),
                                lambda ps: torch.optim.AdamW(ps, lr=0.02, amsgrad=True, foreach=False)),
        "sgd_foreach_nesterov": (lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True, foreach=True),
                                 lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True, foreach=False)),
    }
    for name, (gpu_make, cpu_make) in cases.items():
        got, opt = run(gpu_make, "cuda", grads)
        want, _ = run(cpu_make, "cpu", grads)
        assert torch.allclose(got, want, rtol=1e-5, atol=1e-6), (name, (got - want).abs().max())
        if name == "adam_capturable":
            step = next(iter(opt.state.values()))["step"]
            assert step.device.type == "cuda" and step.item() == 4.0


if __name__ == "__main__":
    main()
