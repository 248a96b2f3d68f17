"""torchao's CPUOffloadOptimizer as its first draft wrote it: a post-accumulate-grad hook copies each gradient to
pinned host memory on a D2H stream (`p_cpu.grad = p_cuda.grad.to("cpu", non_blocking=True)`, then
`p_cuda.grad.record_stream(d2h_stream)` and `p_cuda.grad = None`), `step()` synchronizes the D2H stream, runs the
wrapped optimizer on the host copies, and copies each updated parameter back with `p_cuda.copy_(p_cpu,
non_blocking=True)` on the default stream. The draft has no `d2h_grad_stream.wait_stream(current_stream())`
before the copy (a later draft added it, and the released optimizer keeps it: x23): the D2H copy on the side
stream may read the gradient before the backward kernel on the default stream has written it, and the
D2H stream's synchronize no longer covers the default stream's H2D parameter copies, so the host optimizer
writes pinned `p_cpu` while the previous step's H2D copy from it may still be queued.

EXPECTED: hazard
KINDS: host-read, write-after-read
KINDS_ALSO: read-after-write
WORLD_SIZE: 1
MODELLED ON: pytorch/ao's CPUOffloadOptimizer drafts (the low_bit_optim cpu_offload prototype before it became
torchao/prototype/low_bit_optim/cpu_offload.py): `CPUOffloadOptimizer(base_optimizer)` with `d2h_grad_stream`,
`copy_grad_hook` ("only deallocate p_cuda.grad once D2H copy finishes"), the parameters swapped for
`p.detach().cpu().pin_memory()` in the base optimizer's param_groups, `step()` =
`d2h_grad_stream.synchronize(); optim.step(); p_cuda.copy_(p_cpu, non_blocking=True)`; the next draft's only
change to the hook is `self.d2h_grad_stream.wait_stream(torch.cuda.current_stream())` before the stream context.
SIMPLIFIED: a two-layer MLP, AdamW, four steps, loss without .item() in the loop (no host sync there).
RULE: work on two streams is unordered unless an event or wait_stream orders it; Stream.synchronize waits only for
that stream's work (https://pytorch.org/docs/stable/notes/cuda.html#cuda-streams); a non_blocking H2D copy from
pinned memory reads the host buffer when it runs (https://pytorch.org/tutorials/intermediate/pinmem_nonblock.html).
WHAT SIMDIST SAYS: host-read (its label for a D2H copy reading what another stream's kernel may not have written:
p42's KIND_NOTE): the D2H stream's copies of the gradients are unordered with the backward kernels (mm, sum) on
the default stream that write them; write-after-read: the next step's host AdamW (mul_) writes pinned p_cpu
unordered with the default stream's H2D copies still reading it. Both OBSERVED on seeds 0-2 (NaN parameters).
"""
import os

import torch
import torch.nn as nn

DELAY = int(os.environ.get("X_DELAY_CYCLES", "0"))  # a GPU check's torch.cuda._sleep before backward


class CPUOffloadOptimizer:
    def __init__(self, base_optimizer):
        self.optim = base_optimizer
        self.param_cuda2cpu_map = {}
        self.d2h_grad_stream = torch.cuda.Stream()

        def copy_grad_hook(p_cuda):
            if p_cuda.grad is not None:
                p_cpu = self.param_cuda2cpu_map[p_cuda]
                # BUG (the draft): no self.d2h_grad_stream.wait_stream(torch.cuda.current_stream()) here
                with torch.cuda.stream(self.d2h_grad_stream):
                    p_cpu.grad = p_cuda.grad.to("cpu", non_blocking=True)
                p_cuda.grad.record_stream(self.d2h_grad_stream)  # freed once the D2H copy is done
                p_cuda.grad = None

        for group in base_optimizer.param_groups:  # the base optimizer steps the pinned host copies
            for i, p in enumerate(group["params"]):
                p_cpu = p.detach().cpu().pin_memory()
                group["params"][i] = p_cpu
                self.param_cuda2cpu_map[p] = p_cpu
                p.register_post_accumulate_grad_hook(copy_grad_hook)

    @torch.no_grad()
    def step(self):
        self.d2h_grad_stream.synchronize()
        self.optim.step()
        for p_cuda, p_cpu in self.param_cuda2cpu_map.items():
            p_cuda.copy_(p_cpu, non_blocking=True)


def make_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(128, 256), nn.GELU(), nn.Linear(256, 64))


def main():
    torch.cuda.set_device(0)
    g = torch.Generator().manual_seed(1)
    batches = [torch.randn(32, 128, generator=g) for _ in range(4)]
    ref = make_model()
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    for x in batches:
        ref(x).square().mean().backward()
        ref_opt.step()
        ref_opt.zero_grad()
    model = make_model().cuda()
    opt = CPUOffloadOptimizer(torch.optim.AdamW(model.parameters(), lr=1e-2))
    for x in batches:
        loss = model(x.cuda(non_blocking=True)).square().mean()
        if DELAY:
            torch.cuda._sleep(DELAY)
        loss.backward()
        opt.step()
    worst = 0.0
    for p, r in zip(model.parameters(), ref.parameters()):
        d = ((p.detach().cpu() - r).abs().max() / r.abs().max()).item()
        worst = max(worst, d if d == d else float("inf"))
    print(f"largest relative parameter difference from the CPU reference: {worst:.3g}")


if __name__ == "__main__":
    main()
