"""NeMo's EMAOptimizer: a wrapper around the training optimizer that, after each step, updates an exponential
moving average of the parameters on its own CUDA stream (`stream.wait_stream(current_stream())`, then
`torch._foreach_mul_` / `torch._foreach_add_` of the EMA tensors with the live parameters under the stream, the
parameters taken as `param.data.to(device, non_blocking=True)`, which on the same device is the parameter itself),
and joins that stream (`stream.synchronize()`) at the start of the next step, before the optimizer writes the
parameters in place, and before swapping the EMA weights in for evaluation or taking a state dict. The EMA
weights, the evaluation output with them swapped in, and the trained weights swapped back all equal a CPU run's.

EXPECTED: clean
WORLD_SIZE: 1
MODELLED ON: NVIDIA/NeMo nemo/collections/common/callbacks/ema.py (`ema_update`, `EMAOptimizer.step`:
`self.join()` first, the stream made at the first step, `ema_params` as deep copies of the parameters; `update`:
`self.stream.wait_stream(torch.cuda.current_stream())`, `with torch.cuda.stream(self.stream)`,
`param.data.to(self.device, non_blocking=True)`; `swap_tensors` through an `empty_like` temporary;
`switch_main_parameter_weights` and `swap_ema_weights`; `join`: `self.stream.synchronize()`; `state_dict` joins).
The CPU-EMA thread branch (device="cpu") is left out.
SIMPLIFIED: a two-layer MLP, SGD with momentum, five steps, decay 0.5 (so that every step's parameters matter),
no Lightning callback around it.
RULE: Stream.synchronize blocks the host until the stream's queued work is done, so kernels launched afterwards on
any stream are ordered after it (https://pytorch.org/docs/stable/notes/cuda.html#cuda-streams); wait_stream orders
the EMA stream after the optimizer step queued before it.
"""
import contextlib
import copy
import os

import torch
import torch.nn as nn

DELAY = int(os.environ.get("X_DELAY_CYCLES", "0"))  # a GPU check's torch.cuda._sleep on the EMA stream


@torch.no_grad()
def ema_update(ema_model_tuple, current_model_tuple, decay):
    torch._foreach_mul_(ema_model_tuple, decay)
    torch._foreach_add_(ema_model_tuple, current_model_tuple, alpha=(1.0 - decay))


class EMAOptimizer(torch.optim.Optimizer):
    def __init__(self, optimizer, device, decay=0.9999, every_n_steps=1, current_step=0):
        self.optimizer, self.device, self.decay = optimizer, device, decay
        self.every_n_steps, self.current_step = every_n_steps, current_step
        self.first_iteration, self.rebuild_ema_params = True, True
        self.stream, self.ema_params = None, ()

    def all_parameters(self):
        return (param for group in self.param_groups for param in group["params"])

    def step(self, closure=None):
        self.join()
        if self.first_iteration:
            if any(p.is_cuda for p in self.all_parameters()):
                self.stream = torch.cuda.Stream()
            self.first_iteration = False
        if self.rebuild_ema_params:
            opt_params = list(self.all_parameters())
            self.ema_params += tuple(copy.deepcopy(p.data.detach()).to(self.device)
                                     for p in opt_params[len(self.ema_params):])
            self.rebuild_ema_params = False
        loss = self.optimizer.step(closure)
        if self.current_step % self.every_n_steps == 0:
            self.update()
        self.current_step += 1
        return loss

    @torch.no_grad()
    def update(self):
        if self.stream is not None:
            self.stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.stream):
            if DELAY:
                torch.cuda._sleep(DELAY)
            current_model_state = tuple(p.data.to(self.device, non_blocking=True) for p in self.all_parameters())
            ema_update(self.ema_params, current_model_state, self.decay)

    def swap_tensors(self, tensor1, tensor2):
        tmp = torch.empty_like(tensor1)
        tmp.copy_(tensor1)
        tensor1.copy_(tensor2)
        tensor2.copy_(tmp)

    def switch_main_parameter_weights(self):
        self.join()
        for param, ema_param in zip(self.all_parameters(), self.ema_params):
            self.swap_tensors(param.data, ema_param)

    @contextlib.contextmanager
    def swap_ema_weights(self, enabled=True):
        if enabled:
            self.switch_main_parameter_weights()
        try:
            yield
        finally:
            if enabled:
                self.switch_main_parameter_weights()

    def __getattr__(self, name):
        return getattr(self.optimizer, name)

    def join(self):
        if self.stream is not None:
            self.stream.synchronize()

    def state_dict(self):
        self.join()
        return {"opt": self.optimizer.state_dict(), "ema": self.ema_params, "current_step": self.current_step}


def make_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 128), nn.Tanh(), nn.Linear(128, 16))


def run(model, device, batches, x_eval):
    opt = EMAOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), device=device, decay=0.5)
    for x in batches:
        model(x.to(device)).square().mean().backward()
        opt.step()
        opt.zero_grad()
    with opt.swap_ema_weights():
        out = model(x_eval.to(device))
    sd = opt.state_dict()
    return [t.cpu() for t in sd["ema"]], out.cpu(), [p.detach().cpu() for p in model.parameters()]


def main():
    torch.cuda.set_device(0)
    g = torch.Generator().manual_seed(1)
    batches = [torch.randn(32, 64, generator=g) for _ in range(5)]
    x_eval = torch.randn(8, 64, generator=g)
    ref = run(make_model(), torch.device("cpu"), batches, x_eval)
    got = run(make_model().cuda(), torch.device("cuda"), batches, x_eval)
    worst = {}
    for name, a, b in zip(("ema", "eval", "params"), got, ref):
        a, b = (a, b) if isinstance(a, list) else ([a], [b])
        d = max(((x - y).abs().max() / y.abs().max()).item() for x, y in zip(a, b))
        worst[name] = d if d == d else float("inf")
    print("largest relative differences from the CPU reference:", {k: f"{v:.3g}" for k, v in worst.items()})
    assert max(worst.values()) < 1e-4, worst


if __name__ == "__main__":
    main()
