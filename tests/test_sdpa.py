"""scaled_dot_product_attention on simulated CUDA tensors runs the fused kernel a GPU picks (simdist/faces/sdpa.py).

Rules, each from torch's source and checked against an H200 (torch 2.11 + CUDA 13.0, cuDNN 9.19, measured
2026-12-02 by ci/gpu_sdp_choice.py, docs/gpu/sdp-choice-2026-12-02.json):
- the backend is the CUDA chooser's (aten/src/ATen/native/transformers/cuda/sdp_utils.cpp select_sdp_backend):
  cuDNN first on sm90 with cuDNN > 9.15, then flash, memory-efficient, math; every measured case agrees;
- the fused kernels' outputs are laid out as on the GPU (the measured strides), and their values and gradients
  equal eager CPU attention's;
- DTensor's tensor-parallel attention works as on a GPU (DTensor shards the fused kernels; the math path's plain
  causal mask made it fail with "got mixed torch.Tensor and DTensor").
"""
import json
import os

import pytest
import torch
import torch.nn.functional as F

import simdist
from simdist.faces.sdpa import gpu_sdp_choice

HERE = os.path.dirname(os.path.abspath(__file__))
MEASURED = json.load(open(os.path.join(HERE, "..", "docs", "gpu", "sdp-choice-2026-12-02.json")))
NAMES = {0: "math", 1: "flash", 2: "efficient", 3: "cudnn"}


def _case_tensors(c):
    """Host tensors with the measured case's dtype, shapes and layout (the chooser reads only metadata)."""
    dtype = getattr(torch, c["dtype"])
    B, Hq, Hk, Sq, Sk, D, Dv = c["shape"]

    def mk(H, S, d):
        if c["layout"] == "bshd":
            return torch.zeros(B, S, H, d, dtype=dtype).transpose(1, 2)
        if c["layout"] == "lastdim":
            return torch.zeros(B, H, S, d * 2, dtype=dtype)[..., ::2]
        if c["layout"] == "offset":
            return torch.zeros(B * H * S * d + 1, dtype=dtype)[1:].view(B, H, S, d)
        return torch.zeros(B, H, S, d, dtype=dtype)
    q, k, v = mk(Hq, Sq, D), mk(Hk, Sk, D), mk(Hk, Sk, Dv)
    mask = None
    if c["mask"] == "bool":
        mask = torch.ones(Sq, Sk, dtype=torch.bool).tril()
    elif c["mask"] == "float":
        mask = torch.zeros(B, 1, Sq, Sk, dtype=dtype)
    return q, k, v, mask


def test_backend_choice_matches_the_h200_for_every_measured_case():
    assert MEASURED["capability"] == [9, 0] and MEASURED["cudnn"] > 91500
    wrong = []
    for c in MEASURED["cases"]:
        q, k, v, mask = _case_tensors(c)
        got = NAMES[gpu_sdp_choice(q, k, v, mask, c["dropout"], c["causal"], None, c["gqa"])]
        if got != c["choice"]:
            wrong.append((c, got))
    assert not wrong, f"{len(wrong)} of {len(MEASURED['cases'])} cases differ: {wrong[:5]}"
    assert {c["choice"] for c in MEASURED["cases"]} == {"math", "flash", "efficient", "cudnn"}


def test_backend_switches_are_honoured():
    from torch.nn.attention import SDPBackend, sdpa_kernel
    q = torch.zeros(2, 4, 16, 64, dtype=torch.bfloat16)
    assert gpu_sdp_choice(q, q, q) == 3
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.MATH]):
        assert gpu_sdp_choice(q, q, q) == 1
    with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION]):
        assert gpu_sdp_choice(q, q, q) == 2
    with sdpa_kernel([SDPBackend.MATH]):
        assert gpu_sdp_choice(q, q, q) == 0
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        with pytest.raises(RuntimeError, match="No available kernel"):
            gpu_sdp_choice(q, q, q, torch.zeros(16, 16, dtype=torch.bfloat16))  # flash takes no mask


def _attention(dtype, D, mask_kind, causal, seed=0):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(2, 4, 16, D, generator=g).to(dtype) for _ in range(3))
    grad = torch.randn(2, 4, 16, D, generator=g).to(dtype)
    mask = torch.ones(16, 16, dtype=torch.bool).tril() if mask_kind == "bool" else None

    def fn():
        qs, ks, vs = (t.cuda().requires_grad_() for t in (q, k, v))
        o = F.scaled_dot_product_attention(qs, ks, vs, attn_mask=None if mask is None else mask.cuda(),
                                           is_causal=causal)
        o.backward(grad.cuda())
        return (o.grad_fn.name(), list(o.stride()), o.detach().cpu(),
                [t.grad.cpu() for t in (qs, ks, vs)])
    res = simdist.run(fn, world_size=1)
    assert res.hazards == []
    name, stride, out, grads = res.returns[0]
    qc, kc, vc = (t.clone().double().requires_grad_() for t in (q, k, v))
    oc = F.scaled_dot_product_attention(qc, kc, vc, attn_mask=mask, is_causal=causal)
    oc.backward(grad.double())
    return name, stride, out, grads, oc.detach(), [t.grad for t in (qc, kc, vc)]


@pytest.mark.parametrize("dtype,D,mask,causal,kernel", [
    (torch.float32, 64, None, True, "ScaledDotProductEfficientAttentionBackward0"),
    (torch.float32, 64, "bool", False, "ScaledDotProductEfficientAttentionBackward0"),
    (torch.bfloat16, 64, None, True, "ScaledDotProductCudnnAttentionBackward0"),
    (torch.bfloat16, 64, "bool", False, "ScaledDotProductCudnnAttentionBackward0"),
    (torch.bfloat16, 100, None, True, "SliceBackward0"),  # flash, head dim padded to 104 and sliced back
    (torch.bfloat16, 320, None, False, "ScaledDotProductEfficientAttentionBackward0"),
])
def test_fused_kernels_compute_attention_and_its_gradients(dtype, D, mask, causal, kernel):
    name, stride, out, grads, ref, ref_grads = _attention(dtype, D, mask, causal)
    assert name == kernel
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    assert torch.allclose(out.double(), ref, atol=tol, rtol=tol)
    for g, r in zip(grads, ref_grads):
        assert torch.allclose(g.double(), r, atol=tol * 4, rtol=tol * 4)


def test_fused_outputs_have_the_gpus_layouts():
    """Strides of the fused kernels' outputs as measured on the H200 (efficient attention writes (B, S, H, D)
    memory; cuDNN and flash write (B, H, S, D))."""
    lay = MEASURED["layouts"]

    def fn():
        a = torch.ops.aten
        out = {}
        for dt in (torch.bfloat16, torch.float32):
            q = torch.randn(2, 4, 16, 64, device="cuda", dtype=dt)
            if dt != torch.float32:
                r = a._scaled_dot_product_flash_attention(q, q, q, 0.0, True)
                out["flash_" + str(dt)] = [[list(r[0].shape), list(r[0].stride())], [list(r[1].shape), list(r[1].stride())]]
            for lse in (False, True):
                r = a._scaled_dot_product_efficient_attention(q, q, q, None, lse, 0.0, True)
                out[f"eff_{dt}_{lse}"] = [[list(r[0].shape), list(r[0].stride())], [list(r[1].shape), list(r[1].stride())]]
        return out
    got = simdist.run(fn, world_size=1).returns[0]
    for key, val in got.items():
        assert val == [x[:2] for x in lay[key][:2]], key


def test_dropout_keeps_the_math_path_and_a_direct_fused_call_with_dropout_is_refused():
    def fn():
        q = torch.randn(2, 4, 16, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        o = F.scaled_dot_product_attention(q, q, q, dropout_p=0.5, is_causal=True)
        name = o.grad_fn.name()
        try:
            torch.ops.aten._scaled_dot_product_flash_attention(q, q, q, 0.5, True)
        except simdist.UnsupportedOperation as e:
            return name, str(e)
        return name, None
    name, err = simdist.run(fn, world_size=1).returns[0]
    assert "Cudnn" not in name and "Flash" not in name
    assert err is not None and "Philox" in err


DTENSOR_TP = '''
import os, torch, torch.nn as nn, torch.nn.functional as F, torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

class Attn(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.wq, self.wk, self.wv = (nn.Linear(dim, dim, bias=False) for _ in range(3))
        self.wo = nn.Linear(dim, dim, bias=False)
    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = (w(x).view(b, s, -1, 16).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(o.transpose(1, 2).reshape(b, s, -1))

def main():
    mesh = init_device_mesh("cuda", (int(os.environ["WORLD_SIZE"]),))   # no set_device: DeviceMesh picks LOCAL_RANK
    torch.manual_seed(0)
    model = Attn(64, 4).to(DTYPE)
    ref = Attn(64, 4).to(DTYPE)
    ref.load_state_dict(model.state_dict())
    model = model.cuda()
    plan = {"wq": ColwiseParallel(use_local_output=False), "wk": ColwiseParallel(use_local_output=False),
            "wv": ColwiseParallel(use_local_output=False), "wo": RowwiseParallel()}
    model = parallelize_module(model, mesh, plan)
    x = torch.randn(2, 8, 64, dtype=DTYPE)
    out = model(x.cuda())
    out.float().pow(2).sum().backward()
    r = ref(x)
    r.float().pow(2).sum().backward()
    tol = 1e-4 if DTYPE == torch.float32 else 5e-2
    assert torch.allclose(out.cpu().float(), r.float(), atol=tol, rtol=tol), (out.cpu() - r).abs().max()
    g = model.wq.weight.grad.full_tensor().cpu().float()
    assert torch.allclose(g, ref.wq.weight.grad.float(), atol=tol * 10, rtol=tol * 10), (g - ref.wq.weight.grad).abs().max()
    dist.destroy_process_group()

if __name__ == "__main__":
    main()
'''


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_dtensor_tensor_parallel_attention_runs_as_on_a_gpu(tmp_path, dtype):
    """A tensor-parallel attention block (parallelize_module, SDPA on DTensor heads) as in pytorch/examples'
    fsdp_tp_example.py: runs, equals the single-process CPU block, no hazards."""
    script = tmp_path / "tp_attn.py"
    script.write_text(DTENSOR_TP.replace("DTYPE", f"torch.{dtype}"))
    res = simdist.run_script(str(script), world_size=2)
    assert res.hazards == []
