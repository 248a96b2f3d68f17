"""torchao's CPUOffloadOptimizer as released (the fix of x22's draft): every parameter has a pinned host copy and a
pinned host gradient made once; the post-accumulate-grad hook makes the offload stream wait for the compute stream,
copies the gradient into the pinned host gradient there, records an event per parameter (`stream.record_event()`),
and with offload_gradients frees the device gradient after `record_stream(stream)`; `step()` synchronizes each
parameter's event, steps that parameter's own host AdamW, queues its H2D copy back on the offload stream, and
synchronizes the offload stream before returning ("make sure param H2D finishes before the next forward pass").
The trained parameters equal a CPU run's.

EXPECTED: clean
WORLD_SIZE: 1
MODELLED ON: pytorch/ao torchao/prototype/low_bit_optim/cpu_offload.py at 122eb73 (`CPUOffloadOptimizer.__init__`:
`p_host = torch.empty_like(p_device, device="cpu", pin_memory=True)`, `p_host.grad = torch.empty_like(p_host,
pin_memory=True)`, `p_host.copy_(p_device.detach(), non_blocking=True)`, one optimizer per parameter,
`register_post_accumulate_grad_hook(backward_hook)`; `backward_hook`: `self.stream.wait_stream(current_stream())`,
`p_host.grad.copy_(p_device.grad, non_blocking=True)` under the stream, the insertion-ordered `self.queue` of
`self.stream.record_event()`, `p_device.grad.record_stream(self.stream); p_device.grad = None`; `step`:
`grad_d2h_event.synchronize()`, the per-parameter step, `p_device.copy_(p_host, non_blocking=True)` under the
stream, `self.stream.synchronize()`, `self.queue.clear()`). The fused CPU AdamW default is kept (fused=True).
SIMPLIFIED: a two-layer MLP, four steps, offload_gradients=True.
RULE: wait_stream orders the offload stream after the backward kernels queued before it; Event.synchronize and
Stream.synchronize block the host until the work recorded before them is done
(https://pytorch.org/docs/stable/notes/cuda.html#cuda-streams); record_stream keeps a freed block from reuse until
that stream's queued work is done (torch.Tensor.record_stream docs).
"""
import os

import torch
import torch.nn as nn

DELAY = int(os.environ.get("X_DELAY_CYCLES", "0"))  # a GPU check's torch.cuda._sleep before backward


class CPUOffloadOptimizer:
    def __init__(self, params, optimizer_class=torch.optim.AdamW, *, offload_gradients=False, **kwargs):
        if optimizer_class is torch.optim.AdamW and "fused" not in kwargs:
            kwargs.update(fused=True)
        param_groups = list(params)
        if not isinstance(param_groups[0], dict):
            param_groups = [{"params": param_groups}]
        self.param_d2h_map, self.optim_dict = {}, {}
        self.stream = torch.cuda.Stream()
        self.queue = {}  # insertion order: the order of the optimizer steps

        def backward_hook(p_device):
            if p_device.grad is not None:
                p_host = self.param_d2h_map[p_device]
                self.stream.wait_stream(torch.cuda.current_stream())  # backward for this param finished
                with torch.cuda.stream(self.stream):
                    p_host.grad.copy_(p_device.grad, non_blocking=True)
                if p_device in self.queue:
                    del self.queue[p_device]
                self.queue[p_device] = self.stream.record_event()
                if offload_gradients:
                    p_device.grad.record_stream(self.stream)
                    p_device.grad = None

        for group in param_groups:
            ps = group.pop("params")
            for p_device in ps:
                if not p_device.requires_grad:
                    continue
                p_host = torch.empty_like(p_device, device="cpu", pin_memory=True)
                p_host.grad = torch.empty_like(p_host, pin_memory=True)
                p_host.copy_(p_device.detach(), non_blocking=True)
                self.param_d2h_map[p_device] = p_host
                p_device.register_post_accumulate_grad_hook(backward_hook)
                self.optim_dict[p_device] = optimizer_class([{"params": p_host, **group}], **kwargs)

    @torch.no_grad()
    def step(self):
        for p_device, grad_d2h_event in self.queue.items():
            grad_d2h_event.synchronize()
            self.optim_dict[p_device].step()
            p_host = self.param_d2h_map[p_device]
            with torch.cuda.stream(self.stream):
                p_device.copy_(p_host, non_blocking=True)
        self.stream.synchronize()  # param H2D finished before the next forward pass
        self.queue.clear()

    def zero_grad(self, set_to_none=True):
        for p_device in self.param_d2h_map:
            p_device.grad = None


def make_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(128, 256), nn.GELU(), nn.Linear(256, 64))


def main():
    torch.cuda.set_device(0)
    g = torch.Generator().manual_seed(1)
    batches = [torch.randn(32, 128, generator=g) for _ in range(4)]
    ref = make_model()
    ref_opts = [torch.optim.AdamW([p], lr=1e-2, fused=True) for p in ref.parameters()]
    for x in batches:
        ref(x).square().mean().backward()
        for o in ref_opts:
            o.step()
            o.zero_grad()
    model = make_model().cuda()
    opt = CPUOffloadOptimizer(model.parameters(), offload_gradients=True, lr=1e-2)
    for x in batches:
        loss = model(x.cuda(non_blocking=True)).square().mean()
        if DELAY:
            torch.cuda._sleep(DELAY)
        loss.backward()
        opt.step()
        opt.zero_grad()
    worst = 0.0
    for p, r in zip(model.parameters(), ref.parameters()):
        d = ((p.detach().cpu() - r).abs().max() / r.abs().max()).item()
        worst = max(worst, d if d == d else float("inf"))
    print(f"largest relative parameter difference from the CPU reference: {worst:.3g}")
    # an H200 (ci/gpu_x_facts3.py, 2026-12-02) gives 2.43e-4 at every delay: cuBLAS's fp32 GEMMs round otherwise
    # than the CPU's and AdamW's m / sqrt(v) turns tiny gradient differences into whole steps of lr; a missing
    # wait (x22) gives inf
    assert worst < 1e-3, worst


if __name__ == "__main__":
    main()
