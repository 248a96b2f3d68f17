"""The backward of SiLU and Mish on CUDA is one kernel each (aten.silu_backward / aten.mish_backward), computed in
float opmath and rounded once to the tensor's dtype; in bfloat16 and float16 its values equal the CPU kernel's bit
for bit (measured on an H200, docs/gpu/b-series-facts-2026-12-02.json: 0 of 4096 elements differ). A LLaMA-style
SwiGLU MLP (`down(silu(gate(x)) * up(x))`, as transformers' LlamaMLP / Qwen2MLP / MistralMLP) in bfloat16 trains
for three steps on the device and on the CPU; every step's gradient through the SiLU, and a Mish layer's, is
checked bit for bit against the CPU kernel on the same inputs, and the weights against the CPU run (bf16
matmuls round differently on a GPU: a loose bound).

EXPECTED: clean
WORLD_SIZE: 1
MODELLED ON: huggingface/transformers 4.57 src/transformers/models/llama/modeling_llama.py `LlamaMLP.forward`
(`self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))`, act_fn = ACT2FN["silu"] = nn.SiLU), trained in
bfloat16; without transformers.
SIMPLIFIED: one MLP block, hidden 64, intermediate 128, plain SGD.
RULE: an op with a backend kernel and a CompositeImplicitAutograd kernel runs the backend kernel; autograd's CUDA
entry uses the decomposition "only when there's no direct registration to its corresponding backend key"
(aten/src/ATen/core/dispatch/OperatorEntry.cpp computeDispatchTableEntryWithDebug). silu_backward has a CUDA
kernel (aten/src/ATen/native/cuda/ActivationSiluKernel.cu), so a GPU never runs math_silu_backward.
WHAT SIMDIST SAYS: clean; each SiLU / Mish backward is one kernel whose values are the CPU kernel's. Before notes
b1 a CPU build of torch decomposed them into six bf16-rounded ops (0.03 off in 2044 of 4096 elements).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class SwiGLU(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate_proj = nn.Linear(64, 128, bias=False)
        self.up_proj = nn.Linear(64, 128, bias=False)
        self.down_proj = nn.Linear(128, 64, bias=False)
        self.act_fn = nn.SiLU()

    def forward(self, x):
        self.g = self.gate_proj(x)
        self.a = self.act_fn(self.g)
        self.g.retain_grad()
        self.a.retain_grad()
        h = self.down_proj(self.a * self.up_proj(x))
        return F.mish(h)


def train(device, batches):
    torch.manual_seed(0)
    m = SwiGLU().to(device=device, dtype=torch.bfloat16)
    opt = torch.optim.SGD(m.parameters(), lr=0.5)
    act_grads = []
    for x in batches:
        x = x.to(device)
        out = m(x)
        gy = torch.ones_like(out)
        out.backward(gy)
        act_grads.append((m.g.detach().cpu(), m.a.grad.cpu(), m.g.grad.cpu()))
        opt.step()
        opt.zero_grad()
    return act_grads, [p.detach().float().cpu() for p in m.parameters()]


def main():
    torch.cuda.set_device(0)
    g = torch.Generator().manual_seed(1)
    batches = [torch.randn(32, 64, generator=g).to(torch.bfloat16) * 3 for _ in range(3)]
    dev_grads, dev_params = train(torch.device("cuda"), batches)
    _, cpu_params = train(torch.device("cpu"), batches)
    for gate, grad_act, grad_gate in dev_grads:  # the SiLU's backward in each step, against the CPU kernel
        assert torch.equal(grad_gate, torch.ops.aten.silu_backward(grad_act, gate))
    for dt in (torch.bfloat16, torch.float16):
        x = (torch.randn(4096, generator=g) * 3).to(dt)
        gy = torch.randn(4096, generator=g).to(dt)
        for op in (torch.ops.aten.silu_backward, torch.ops.aten.mish_backward):
            got = op(gy.cuda(), x.cuda()).cpu()
            want = op(gy, x)
            assert torch.equal(got, want), (dt, op, int((got != want).sum()))
        xd = x.cuda().requires_grad_()
        F.silu(xd).backward(gy.cuda())
        assert torch.equal(xd.grad.cpu(), torch.ops.aten.silu_backward(gy, x)), dt
    worst = max((a - b).abs().max().item() / b.abs().max().item() for a, b in zip(dev_params, cpu_params))
    print(f"SiLU / Mish backward: the CPU kernel's values; weights after 3 bf16 steps within {worst:.3g} of the CPU's")
    assert worst < 0.05, worst


if __name__ == "__main__":
    main()
