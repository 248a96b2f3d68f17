"""Facts for notes b3, on one H200: what F.rms_norm's fused CUDA kernels (_fused_rms_norm, _fused_rms_norm_backward)
compute, against candidate host formulas. For float32 / bfloat16 / float16 inputs, with and without a weight: the
max abs difference and the count of differing elements of the GPU's output, rstd, grad_input and grad_weight from
(a) the CPU's F.rms_norm (the CompositeImplicitAutograd rms_norm_composite) and its autograd, (b) "opmath": every
step in float32, the output rounded once, x * rstd * w; (c) "opmath_w_after": x * rstd rounded to the dtype, then
times w in the dtype (the composite's order). Also runs on a CPU build (then only the CPU columns mean anything)."""
import json
import sys

import torch
import torch.nn.functional as F

dev = "cuda" if torch.cuda.is_available() else "cpu"
out = {"torch": torch.__version__, "device": torch.cuda.get_device_name() if dev == "cuda" else "cpu"}


def opmath(x, w, eps, w_after):
    xf = x.float()
    rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    if w is None:
        return (xf * rstd).to(x.dtype), rstd
    if w_after:
        return (xf * rstd).to(x.dtype) * w, rstd
    return (xf * rstd * w.float()).to(x.dtype), rstd


def opmath_backward(gy, x, w, rstd):
    xf, gf = x.float(), gy.float()
    xhat = xf * rstd
    gw = gf * w.float() if w is not None else gf
    n = x.shape[-1]
    gx = rstd * (gw - xhat * (gw * xhat).sum(-1, keepdim=True) / n)
    gweight = (gf * xhat).sum(0) if w is not None else None
    return gx.to(x.dtype), None if gweight is None else gweight.to(w.dtype)


def diff(a, b):
    if a is None or b is None:
        return None
    a, b = a.detach().cpu(), b.detach().cpu()
    return {"max_abs": (a.double() - b.double()).abs().max().item(), "n_differ": int((a != b).sum()), "n": a.numel()}


g = torch.Generator().manual_seed(0)
X = torch.randn(64, 256, generator=g) * 2
W = torch.randn(256, generator=g) * 0.5 + 1
GY = torch.randn(64, 256, generator=g)
for dtype in (torch.float32, torch.bfloat16, torch.float16):
    for with_w in (True, False):
        x = X.to(dtype)
        w = W.to(dtype) if with_w else None
        gy = GY.to(dtype)
        xd = x.detach().clone().to(dev).requires_grad_()
        wd = w.detach().clone().to(dev).requires_grad_() if with_w else None
        y = F.rms_norm(xd, (256,), wd, 1e-6)
        y.backward(gy.to(dev))
        fused = torch.ops.aten._fused_rms_norm(x.to(dev), [256], None if w is None else w.to(dev), 1e-6) if dev == "cuda" else None
        xc = x.detach().clone().requires_grad_()
        wc = w.detach().clone().requires_grad_() if with_w else None
        yc = F.rms_norm(xc, (256,), wc, 1e-6)
        yc.backward(gy)
        row = {"out_vs_cpu": diff(y, yc), "grad_input_vs_cpu": diff(xd.grad, xc.grad),
               "grad_weight_vs_cpu": diff(None if wd is None else wd.grad, None if wc is None else wc.grad)}
        for name, after in (("opmath", False), ("opmath_w_after", True)):
            o, rstd = opmath(x, w, 1e-6, after)
            row[f"out_vs_{name}"] = diff(y, o)
            if fused is not None:
                row[f"rstd_vs_{name}"] = diff(fused[1].reshape(rstd.shape), rstd)
        o, rstd = opmath(x, w, 1e-6, False)
        gx, gw = opmath_backward(gy, x, w, rstd)
        row["grad_input_vs_opmath"] = diff(xd.grad, gx)
        row["grad_weight_vs_opmath"] = diff(None if wd is None else wd.grad, gw)
        if fused is not None:
            row["rstd_shape_dtype"] = [list(fused[1].shape), str(fused[1].dtype), list(fused[0].stride())]
        out[f"{dtype}_{'weight' if with_w else 'noweight'}"] = row
json.dump(out, sys.stdout, indent=1)
print()
