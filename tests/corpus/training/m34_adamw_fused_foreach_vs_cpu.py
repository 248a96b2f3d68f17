"""AdamW with fused=True and with foreach=True on CUDA parameters (the defaults torchtitan and HF Trainer pick)
for a few steps with weight decay and amsgrad, against the single-tensor CPU AdamW on the same gradients.

EXPECTED: clean
WORLD_SIZE: 1
REASON: torch/optim/adamw.py (torch/optim/adam.py _fused_adam / _multi_tensor_adam / _single_tensor_adam implement the same update; https://pytorch.org/docs/stable/generated/torch.optim.AdamW.html); fused and foreach differ from the loop only by rounding.
"""
import torch


def main():
    torch.cuda.set_device(0)
    g = torch.Generator().manual_seed(0)
    shapes = [(32, 16), (32,), (8, 32), (8,)]
    init = [torch.randn(s, generator=g) for s in shapes]
    grads = [[torch.randn(s, generator=g) for s in shapes] for _ in range(4)]
    results = {}
    for mode in ("cpu", "fused", "foreach"):
        dev = "cpu" if mode == "cpu" else "cuda"
        params = [torch.nn.Parameter(t.clone().to(dev)) for t in init]
        kw = {"foreach": False} if mode == "cpu" else {mode: True}
        opt = torch.optim.AdamW(params, lr=1e-2, betas=(0.9, 0.95), weight_decay=0.1, amsgrad=True, **kw)
        for step_grads in grads:
            for p, gr in zip(params, step_grads):
                p.grad = gr.to(dev)
            opt.step()
        results[mode] = [p.detach().cpu() for p in params]
        st = opt.state[params[0]]
        assert float(st["step"]) == 4.0, st["step"]
    for mode in ("fused", "foreach"):
        for a, b in zip(results["cpu"], results[mode]):
            assert torch.allclose(a, b, rtol=1e-5, atol=1e-6), (mode, (a - b).abs().max())


if __name__ == "__main__":
    main()
