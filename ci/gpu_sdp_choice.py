"""Measure on a GPU the scaled_dot_product_attention backend torch picks (torch._fused_sdp_choice) over a grid of
input kinds, and the layouts of the fused kernels' outputs; writes $OUT/sdp_choice.json. simdist's chooser
(simdist/faces/sdpa.py) is checked against the committed result (docs/gpu/sdp-choice-2026-12-02.json) by
tests/test_sdpa.py.

    python3 ci/gpu_sdp_choice.py          # on the GPU machine
"""
import itertools, json, os, sys, torch
out = {"torch": torch.__version__, "cudnn": torch.backends.cudnn.version(),
       "capability": list(torch.cuda.get_device_capability()), "name": torch.cuda.get_device_name(),
       "flash": torch.backends.cuda.flash_sdp_enabled(), "mem": torch.backends.cuda.mem_efficient_sdp_enabled(),
       "cudnn_sdp": torch.backends.cuda.cudnn_sdp_enabled(), "math": torch.backends.cuda.math_sdp_enabled(),
       "order": [int(x) for x in torch._C._get_sdp_priority_order()] if hasattr(torch._C, "_get_sdp_priority_order") else None,
       "cases": []}
names = {0: "math", 1: "flash", 2: "efficient", 3: "cudnn", 4: "overrideable", -1: "error"}
def case(dtype, B, Hq, Hk, Sq, Sk, D, Dv, mask, causal, dropout, grad, gqa, layout):
    dev = "cuda"
    def mk(H, S, d):
        if layout == "bshd":
            return torch.randn(B, S, H, d, device=dev, dtype=dtype).transpose(1, 2)
        if layout == "lastdim":
            return torch.randn(B, H, S, d * 2, device=dev, dtype=dtype)[..., ::2]
        if layout == "offset":
            return torch.randn(B * H * S * d + 1, device=dev, dtype=dtype)[1:].view(B, H, S, d)
        return torch.randn(B, H, S, d, device=dev, dtype=dtype)
    q, k, v = mk(Hq, Sq, D), mk(Hk, Sk, D), mk(Hk, Sk, Dv)
    for t in (q, k, v):
        t.requires_grad_(grad)
    m = None
    if mask == "bool":
        m = torch.ones(Sq, Sk, device=dev, dtype=torch.bool).tril()
    elif mask == "float":
        m = torch.zeros(B, 1, Sq, Sk, device=dev, dtype=dtype)
    try:
        c = torch._fused_sdp_choice(q, k, v, attn_mask=m, dropout_p=dropout, is_causal=causal, enable_gqa=gqa)
        c = names.get(int(c), str(c))
    except Exception as e:
        c = "raise:" + type(e).__name__
    return c
grid = []
for dtype in (torch.float32, torch.bfloat16, torch.float16):
    for D in (6, 16, 64, 72, 100, 128, 192, 256, 320):
        for mask, causal in (("none", False), ("none", True), ("bool", False), ("float", False)):
            for grad in (False, True):
                grid.append((dtype, 2, 4, 4, 16, 16, D, D, mask, causal, 0.0, grad, False, "bhsd"))
for dtype in (torch.float32, torch.bfloat16):
    grid += [(dtype, 2, 4, 4, 16, 24, 64, 64, "none", True, 0.0, False, False, "bhsd"),
             (dtype, 2, 4, 4, 16, 24, 64, 64, "none", False, 0.0, False, False, "bhsd"),
             (dtype, 2, 4, 4, 16, 16, 64, 64, "none", False, 0.1, True, False, "bhsd"),
             (dtype, 2, 4, 4, 16, 16, 64, 64, "none", True, 0.0, True, False, "bshd"),
             (dtype, 2, 4, 4, 16, 16, 64, 64, "none", True, 0.0, True, False, "lastdim"),
             (dtype, 2, 4, 4, 16, 16, 64, 64, "none", True, 0.0, True, False, "offset"),
             (dtype, 2, 8, 2, 16, 16, 64, 64, "none", True, 0.0, True, True, "bhsd"),
             (dtype, 2, 8, 2, 16, 16, 64, 64, "none", True, 0.0, True, False, "bhsd"),
             (dtype, 2, 4, 4, 16, 16, 64, 32, "none", True, 0.0, False, False, "bhsd"),
             (dtype, 2, 4, 4, 1, 16, 64, 64, "none", False, 0.0, False, False, "bhsd"),
             (dtype, 2, 4, 4, 16, 1, 64, 64, "none", False, 0.0, False, False, "bhsd"),
             (dtype, 1, 4, 4, 128, 128, 128, 128, "none", True, 0.0, True, False, "bhsd")]
for g in grid:
    out["cases"].append({"dtype": str(g[0]).replace("torch.", ""), "shape": list(g[1:8]), "mask": g[8], "causal": g[9],
                         "dropout": g[10], "grad": g[11], "gqa": g[12], "layout": g[13], "choice": case(*g)})
# layouts of the fused outputs
lay = {}
for dtype in (torch.bfloat16, torch.float32):
    q = torch.randn(2, 4, 16, 64, device="cuda", dtype=dtype)
    if dtype != torch.float32:
        r = torch.ops.aten._scaled_dot_product_flash_attention(q, q, q, 0.0, True)
        lay["flash_" + str(dtype)] = [[list(t.shape), list(t.stride()), str(t.dtype)] if isinstance(t, torch.Tensor) else repr(t) for t in r]
    for lse in (False, True):
        r = torch.ops.aten._scaled_dot_product_efficient_attention(q, q, q, None, lse, 0.0, True)
        lay[f"eff_{dtype}_{lse}"] = [[list(t.shape), list(t.stride()), str(t.dtype)] if isinstance(t, torch.Tensor) else repr(t) for t in r]
    qb = torch.randn(2, 16, 4, 64, device="cuda", dtype=dtype).transpose(1, 2)
    o = torch.nn.functional.scaled_dot_product_attention(qb, qb, qb, is_causal=True)
    lay["sdpa_bshd_" + str(dtype)] = [list(o.shape), list(o.stride())]
out["layouts"] = lay
d = os.environ.get("OUT", ".")
json.dump(out, open(os.path.join(d, "sdp_choice.json"), "w"), indent=1)
from collections import Counter
print(out["torch"], out["cudnn"], out["capability"], out["name"], out["order"], Counter(c["choice"] for c in out["cases"]))
print(json.dumps(lay))
