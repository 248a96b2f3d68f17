"""simdist against an H200's answers to ci/gpu_d_facts.py (torch 2.11, CUDA 13; docs/gpu/d-series-facts-2026-12-02.json):
the autocast, promotion, dtype (84 ops x 18 dtypes) and tf32 sections, and the rules fixed from them (notes d17,
d18). Every fact of the autocast and promotion sections agrees; the dtype section agrees except the differences
named in KNOWN_DTYPE_DIFFERENCES, each with its reason."""
import hashlib
import json
import os
import re

import pytest
import torch
import torch.nn.functional as F

import simdist

HERE = os.path.dirname(os.path.abspath(__file__))
GPU_FACTS = os.path.join(HERE, "..", "docs", "gpu", "d-series-facts-2026-12-02.json")


@pytest.fixture(scope="module")
def facts(tmp_path_factory):
    """(gpu, sim): the fact script run under simdist (world size 1, no cuBLAS child process)."""
    out = tmp_path_factory.mktemp("dfacts") / "sim.json"
    env = {"FACTS_OUT": str(out), "D_NO_CHILD": "1"}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        simdist.run_script(os.path.join(HERE, "..", "ci", "gpu_d_facts.py"), world_size=1)
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return json.load(open(GPU_FACTS)), json.loads(out.read_text())


# --- d17: autocast of ops simdist routes in Python -------------------------------------------------------------
def test_sdpa_under_autocast_runs_in_the_autocast_dtype():
    """aten/src/ATen/autocast_mode.cpp puts scaled_dot_product_attention in CUDA's lower_precision_fp list: its
    float32 CUDA arguments (and a float mask) are cast to the autocast dtype before the kernel is chosen, float64
    ones are left alone, and the ops it is made of are not cast again. simdist routes F.scaled_dot_product_attention
    in Python (faces/sdpa.py), before the dispatcher, and returned float32 (measured on an H200: float16 /
    bfloat16, the fact file's autocast section, ac16:sdpa / acbf16:sdpa)."""
    def prog():
        a = torch.arange(16., device="cuda").view(1, 1, 4, 4) / 16
        out = {}
        for dt in (torch.float16, torch.bfloat16):
            with torch.autocast("cuda", dtype=dt):
                out[dt] = [F.scaled_dot_product_attention(a, a, a).dtype,
                           F.scaled_dot_product_attention(a, a, a, attn_mask=torch.zeros(4, 4, device="cuda")).dtype,
                           F.scaled_dot_product_attention(a.double(), a.double(), a.double()).dtype,
                           torch._fused_sdp_choice(a.to(dt), a.to(dt), a.to(dt))]
                with torch.autocast("cuda", enabled=False):
                    out[dt].append(F.scaled_dot_product_attention(a, a, a).dtype)
        return out
    r = simdist.run(prog, world_size=1).returns[0]
    for dt in (torch.float16, torch.bfloat16):
        assert r[dt][:3] == [dt, dt, torch.float64]
        assert r[dt][4] == torch.float32  # autocast disabled inside
    # the chooser saw the cast inputs: flash attention for float16 head dim 4 (cuDNN needs a multiple of 8)
    assert r[torch.float16][3] == 1


def test_python_routed_ops_that_autocast_casts_are_wrapped_as_autocast_does():
    """Every function simdist patches in Python that stands for an aten op with an AutocastCUDA kernel (an op in
    autocast_mode.cpp's lists) must cast as that kernel does (faces/autocast.py), or autocast would be bypassed
    silently as it was for scaled_dot_product_attention (notes d17)."""
    from simdist.faces import patches
    routed = []
    for owner, name, new in patches._patch_list():
        if not isinstance(name, str) or not callable(new) or isinstance(new, type):
            continue
        try:
            has = torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{name}", "AutocastCUDA")
        except RuntimeError:  # no aten op of that name
            continue
        if has:
            routed.append((name, getattr(new, "__wrapped_autocast__", None)))
    assert routed and all(kind == "lower_precision_fp" for _, kind in routed), routed


# --- d18: half / bf16 scans ----------------------------------------------------------------------------------
def _hash(t):
    c = t.detach().cpu().contiguous()
    return f"{c.dtype}{tuple(c.shape)}:" + hashlib.sha1(c.reshape(-1).view(torch.uint8).numpy().tobytes()).hexdigest()[:8]


def test_half_cumsum_rounds_every_partial_result_as_cudas_scan():
    """CUDA's cumsum / cumprod scan with std::plus<scalar_t> (cuda/CumsumKernel.cu): every partial sum of a
    float16 / bfloat16 scan is rounded to the type, in the association of the kernel ScanUtils.cuh scan_dim picks
    (CUB's inclusive scan for a 1-d scan, Sklansky blocks for the innermost dim, a sequential scan for an outer
    one: rules/scans.py); the CPU kernel accumulates in float and rounds each output once. Measured on an H200:
    the hashes of `torch.full((5000,), 1.0, dtype).cumsum(0)` (fact file, promotion section)."""
    gpu = json.load(open(GPU_FACTS))["promotion"]

    def prog():
        out = {dt: _hash(torch.full((5000,), 1.0, dtype=dt, device="cuda").cumsum(0))
               for dt in (torch.float16, torch.bfloat16)}
        x = torch.full((300, 2), 1.0, dtype=torch.bfloat16, device="cuda")
        out["outer"] = x.cumsum(0)[:, 0].float().tolist()
        out["f32"] = torch.full((5000,), 1.0, device="cuda").cumsum(0)[-1].item()
        out["to_f32"] = torch.full((5000,), 1.0, dtype=torch.float16, device="cuda").cumsum(0, dtype=torch.float32)[-1].item()
        return out
    r = simdist.run(prog, world_size=1).returns[0]
    assert r[torch.float16] == gpu["cumsum_h_long"][0].strip("'")
    assert r[torch.bfloat16] == gpu["cumsum_bf16_long"][0].strip("'")
    # an outer-dim scan is sequential in bfloat16: it sticks at 256 (256 + 1 rounds to 256), where the CPU gives 300
    assert r["outer"][255] == 256.0 and r["outer"][-1] == 256.0
    assert r["f32"] == 5000.0 and r["to_f32"] == 5000.0  # float32 scans: exact here on both


# --- the fact tables -------------------------------------------------------------------------------------------
def test_autocast_and_promotion_facts_match_the_h200(facts):
    gpu, sim = facts
    for section in ("autocast", "promotion"):
        bad = {k: (v, sim[section].get(k)) for k, v in gpu[section].items() if sim[section].get(k) != v}
        assert not bad, (section, bad)


def _strip(m):
    return m.split("\n(simdist:")[0] if isinstance(m, str) else m


def _kernel_names_only(a, b):
    # the same exception and message but for the kernel's name: '"abs_cuda" not implemented' vs '"abs_cpu" ...'
    na, nb = (re.sub(r'"[A-Za-z_0-9]*"', '"K"', m) for m in (a, b))
    return na[:60] == nb[:60]


# Differences that remain, by (op or op:dtype): why. Values are compared as hashes of the bytes.
KNOWN_DTYPE_DIFFERENCES = {
    # the last bits of transcendental functions and of reductions: CUDA's libdevice / reduction order, not the
    # CPU's (SLEEF / vectorized loops); the dtype and shape agree
    "sin": "ulp", "sigmoid": "ulp", "rsqrt": "ulp", "tanh": "ulp", "sqrt:float64": "ulp", "fft:bool": "ulp",
    "mean:float32": "CUDA's mean multiplies the sum by 1/N (MeanOps factor), the CPU divides",
    "mean:float64": "the same", "var_mean": "the mean's", "std:float64": "ulp", "std:complex128": "ulp",
    "softmax:float32": "ulp", "softmax:float64": "ulp",
    "neg:complex128": "the sign of a zero imaginary part",
    "sort:bool": "equal keys: CUDA's unstable sort orders the indices otherwise",
    # complex32 arithmetic: CUDA computes it in complex<float>; simdist refuses with the CPU kernel's error
    **{f"{op}:complex32": "not modelled" for op in ("div", "sqrt", "exp", "log", "sin", "tanh", "sigmoid", "pow2",
                                                   "sum", "sum_dim", "prod", "lerp", "square", "rsqrt")},
    # both refuse, with another message: the GPU's names the CUDA kernel or a CUDA library
    **{f"{op}:{dt}": "add's dispatch names another stub on the CPU ('add_stub')" for op in
       ("add", "sub", "add_scalar", "add_cpu0d_i", "add_cpu0d_f") for dt in
       ("uint16", "uint32", "uint64", "float8_e4m3fn", "float8_e5m2")},
    "fft:float16": "cuFFT's size check vs MKL's dtype refusal", "fft:complex32": "the same",
    "std:float8_e4m3fn": "std_var_all vs std_cuda", "std:float8_e5m2": "the same",
}


def _known(key):
    op = key.split(":")[0]
    return key in KNOWN_DTYPE_DIFFERENCES or op in KNOWN_DTYPE_DIFFERENCES


def test_dtype_table_matches_the_h200(facts):
    """Each op of the table runs where the GPU runs it (with its result's dtype, shape and bytes) and is refused
    where the GPU refuses it, with the same exception type; messages may name the CPU kernel instead of the CUDA
    one. Fixed from this comparison: rules/cuda_dtypes.py (uint16/32/64, float8, complex32 refusals; flip /
    gather / scatter of them; abs of bool), rules/intdiv.py (histc's dtypes), rules/meta_fixes.py (float8
    products)."""
    gpu, sim = facts
    bad = []
    for k, g in gpu["dtype"].items():
        s = sim["dtype"].get(k)
        if s == g or _known(k):
            continue
        if isinstance(g, str) and isinstance(s, str):
            gs, ss = _strip(g), _strip(s)
            if gs.split(":")[0] == ss.split(":")[0] and (gs[:60] == ss[:60] or _kernel_names_only(gs, ss)
                                                         or ss.startswith(gs[:80]) or gs.startswith(ss[:80])):
                continue
        bad.append((k, g, s))
    assert not bad, f"{len(bad)} differ, e.g. {bad[:5]}"


def test_tf32_matmuls_round_their_operands_as_an_h200s(facts):
    """torch.backends.cuda.matmul.allow_tf32 / set_float32_matmul_precision('high' / 'medium') make an H200's
    float32 mm, linear and bmm round their operands to TF32 (a 10-bit mantissa, to nearest: the product is within
    2e-5 of the float64 product of rounded operands, 0.023 from the exact one; 'medium' is TF32 too, never the CPU's
    bfloat16); by default they are exact. cuDNN's convolution showed no TF32 rounding for the measured shape.
    simdist (rules/tf32.py) lands on the same side of every measured distance: within 1e-4 where the GPU is, more
    than 1e-3 off where the GPU is (the accumulation order is the CPU's: close to the GPU's values, not its bits).
    The flags read back as on the GPU."""
    gpu, sim = facts
    g, s = gpu["tf32"], sim["tf32"]
    for name in ("default", "allow_tf32", "prec_high", "prec_medium", "cudnn_tf32_off"):
        assert s[name]["flags"] == g[name]["flags"]
        for key, gv in g[name].items():
            if key == "flags":
                continue
            assert (gv < 1e-4 and s[name][key] < 1e-4) or (gv > 1e-3 and s[name][key] > 1e-3), (name, key, gv,
                                                                                                 s[name][key])
    assert g["allow_tf32"]["mm_rn"] < 1e-4 < g["allow_tf32"]["mm_exact"]  # (what the rule models)


def test_tf32_rounds_to_nearest_even_and_keeps_nan_and_inf():
    """TF32 keeps float32's 8-bit exponent and the top 10 of its 23 mantissa bits, rounding to nearest with ties
    to even (the distances the H200 measured match round-to-nearest, not truncation): the rule's rounding of
    chosen bit patterns, and NaN / inf / the largest float (which rounds up to inf) kept as IEEE rounding does."""
    from simdist.faces.rules.tf32 import round_to_tf32
    bits = torch.tensor([0x3F800000, 0x3F800FFF, 0x3F801000, 0x3F801001, 0x3F803000, 0x7F800000, 0x7FC00001,
                         0x7F800001, -0x800000, 0x7F7FFFFF], dtype=torch.int32)  # (-0x800000: -inf)
    got = round_to_tf32(bits.view(torch.float32)).view(torch.int32).tolist()
    assert got[:5] == [0x3F800000, 0x3F800000, 0x3F800000, 0x3F802000, 0x3F804000]  # down, tie->even, up, tie->even
    assert got[5] == 0x7F800000 and got[8] == -0x800000 and got[9] == 0x7F800000  # inf, -inf, max -> inf
    assert torch.isnan(round_to_tf32(bits[6:8].view(torch.float32))).all()  # a NaN stays a NaN
