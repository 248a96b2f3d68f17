"""Facts for notes b1 (b-series, real library scripts), on one H200: which kernel computes the backward of SiLU and
Mish on CUDA, and what F.rms_norm dispatches there.

Prints, for float32 / bfloat16 / float16: how far the GPU's aten.silu_backward / mish_backward is from (a) the CPU's
fused kernel on the same inputs and (b) the CompositeImplicitAutograd decomposition (math_silu_backward:
`gy * (s * (1 + x * (1 - s)))` op by op in the tensor's dtype), as the max abs difference and the count of
differing elements; and the aten ops a TorchDispatchMode sees for F.rms_norm forward and backward on CUDA.
Also runs on a CPU build (then "device" is the CPU and only the CPU columns mean anything).
"""
import json
import sys

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

dev = "cuda" if torch.cuda.is_available() else "cpu"
out = {"torch": torch.__version__, "device": torch.cuda.get_device_name() if dev == "cuda" else "cpu"}


def math_silu_backward(gy, x):
    s = torch.sigmoid(x)
    return gy * (s * (1 + x * (1 - s)))


def math_mish_backward(gy, x):
    sig = torch.sigmoid(x)
    tsp = torch.tanh(F.softplus(x))
    return gy * (tsp + x * sig * (1 - tsp * tsp))


g = torch.Generator().manual_seed(0)
x32 = torch.randn(4096, generator=g) * 3
gy32 = torch.randn(4096, generator=g)
for dtype in (torch.float32, torch.bfloat16, torch.float16):
    x, gy = x32.to(dtype), gy32.to(dtype)
    for name, op, math in (("silu", torch.ops.aten.silu_backward, math_silu_backward),
                           ("mish", torch.ops.aten.mish_backward, math_mish_backward)):
        gpu = op(gy.to(dev), x.to(dev)).cpu()
        cpu = op(gy, x)
        dec = math(gy, x)
        ref = op(gy.double(), x.double())
        row = {}
        for k, v in (("cpu_kernel", cpu), ("decomposition", dec)):
            d = (gpu.double() - v.double()).abs()
            row[k] = {"max_abs": d.max().item(), "n_differ": int((gpu != v).sum())}
        for k, v in (("gpu", gpu), ("cpu_kernel", cpu), ("decomposition", dec)):
            row[f"{k}_err_vs_float64"] = (v.double() - ref).abs().max().item()
        out[f"{name}_backward_{dtype}"] = row


class Ops(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.seen.append(str(func))
        return func(*args, **(kwargs or {}))


for dtype in (torch.float32, torch.bfloat16):
    xr = torch.randn(8, 64, device=dev, dtype=dtype, requires_grad=True)
    w = torch.randn(64, device=dev, dtype=dtype, requires_grad=True)
    with Ops() as m:
        y = F.rms_norm(xr, (64,), w, 1e-6)
        fwd = list(m.seen)
        y.sum().backward()
    out[f"rms_norm_ops_{dtype}"] = {"forward": fwd, "backward": m.seen[len(fwd):]}
    with Ops() as m:
        F.silu(xr).sum().backward()
    out[f"silu_autograd_ops_{dtype}"] = m.seen
json.dump(out, sys.stdout, indent=1)
print()
