"""Tests for fakes/transformer_engine.py against an independent reference.

The reference below is written from the quantization rules (fact sheet + TE sources),
not from the module: FP8 encoding is a table lookup with explicit round-to-nearest-even
and saturation, scale arithmetic is done on Python floats rounded to fp32 with
``struct``, and scales are computed by looping over tiles.
"""

import importlib.util
import math
import struct
import sys

import pytest
import torch

import simdist.fakes.transformer_engine as te

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
FP8_MAX = {E4M3: 448.0, E5M2: 57344.0}
BLK = 128


# --------------------------------------------------------------------------- fp32 helpers


def f32(v: float) -> float:
    """Round a Python float to the nearest fp32 value (overflow -> inf)."""
    if math.isnan(v) or math.isinf(v):
        return v
    if abs(v) >= 2.0**128 - 2.0**103:  # halfway above FLT_MAX
        return math.copysign(math.inf, v)
    return struct.unpack("<f", struct.pack("<f", v))[0]


def bits(v: float) -> int:
    return struct.unpack("<I", struct.pack("<f", v))[0]


def from_bits(b: int) -> float:
    return struct.unpack("<f", struct.pack("<I", b & 0xFFFFFFFF))[0]


def ref_scale(amax: float, fp8_max: float, pow2: bool, eps: float, value_for_inf: float) -> float:
    """compute_scale_from_amax, written out on scalars."""
    eps = f32(eps)
    if amax < eps:
        amax = eps
    if math.isinf(amax) or math.isnan(amax) or amax == 0.0:
        return 1.0
    s = f32(fp8_max / amax)  # double division then fp32 rounding == fp32 division
    if math.isinf(s):
        s = f32(value_for_inf)
    if pow2:
        s = from_bits(bits(s) & 0xFF800000)
    return s


def nan_free_amax(t: torch.Tensor) -> float:
    a = t.double().abs()
    a = a[~torch.isnan(a)]
    return a.max().item() if a.numel() else 0.0


# --------------------------------------------------------------------------- fp8 reference codec


def fp8_decode_table(fmt):
    """Value of every fp8 code, decoded bit by bit."""
    ebits, mbits, bias = (4, 3, 7) if fmt == E4M3 else (5, 2, 15)
    out = []
    for code in range(256):
        sign = -1.0 if code & 0x80 else 1.0
        e = (code >> mbits) & ((1 << ebits) - 1)
        m = code & ((1 << mbits) - 1)
        if fmt == E4M3 and e == 15 and m == 7:
            v = math.nan
        elif fmt == E5M2 and e == 31:
            v = math.inf if m == 0 else math.nan
        elif e == 0:
            v = m * 2.0 ** (1 - bias - mbits)
        else:
            v = (1 + m / 2**mbits) * 2.0 ** (e - bias)
        out.append(sign * v)
    return out


TABLES = {fmt: fp8_decode_table(fmt) for fmt in (E4M3, E5M2)}


def ref_encode(y: torch.Tensor, fmt) -> torch.Tensor:
    """fp32 -> fp8 bits: RNE, saturate to +-max (incl. inf), NaN -> 0x7F, keep sign of 0."""
    table = TABLES[fmt]
    codes = [c for c in range(0x80) if math.isfinite(table[c])]
    vals = torch.tensor([table[c] for c in codes], dtype=torch.float64)
    ctab = torch.tensor(codes, dtype=torch.int64)
    a = y.double().abs().reshape(-1)
    idx = torch.searchsorted(vals, torch.nan_to_num(a, nan=0.0, posinf=math.inf))
    hi = idx.clamp(max=len(codes) - 1)
    lo = (idx - 1).clamp(min=0)
    d_lo, d_hi = a - vals[lo], vals[hi] - a
    pick_hi = (d_hi < d_lo) | ((d_hi == d_lo) & (ctab[hi] % 2 == 0))
    code = torch.where(pick_hi, ctab[hi], ctab[lo])
    code = code | torch.signbit(y.reshape(-1)).to(torch.int64) * 0x80
    code = torch.where(torch.isnan(a), 0x7F, code)
    return code.to(torch.uint8).reshape(y.shape)


def ref_decode(q: torch.Tensor, fmt) -> torch.Tensor:
    table = torch.tensor(TABLES[fmt], dtype=torch.float64)
    return table[q.long()].float()


# --------------------------------------------------------------------------- comparisons


def assert_bytes_equal(a: torch.Tensor, b: torch.Tensor):
    assert a.shape == b.shape, (a.shape, b.shape)
    diff = (a.view(torch.uint8) != b.view(torch.uint8)).sum().item()
    assert diff == 0, f"{diff} differing bytes"


def assert_f32_equal(a: torch.Tensor, b: torch.Tensor):
    assert a.shape == b.shape, (a.shape, b.shape)
    assert a.dtype == b.dtype == torch.float32
    diff = (a.contiguous().view(torch.int32) != b.contiguous().view(torch.int32)).sum().item()
    assert diff == 0, f"{diff} differing fp32 values:\n{a}\n{b}"


def assert_same_values(a: torch.Tensor, b: torch.Tensor):
    """Equal dtype/shape; NaN where the other is NaN; other values bitwise equal."""
    assert a.dtype == b.dtype and a.shape == b.shape
    na, nb = torch.isnan(a), torch.isnan(b)
    assert torch.equal(na, nb)
    ia = a.masked_fill(na, 0).contiguous()
    ib = b.masked_fill(nb, 0).contiguous()
    itype = {2: torch.int16, 4: torch.int32}[a.element_size()]
    assert torch.equal(ia.view(itype), ib.view(itype))


def r4(n: int) -> int:
    return (n + 3) // 4 * 4


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


# --------------------------------------------------------------------------- inputs


def make_input(shape, dtype, kind, seed=0):
    """Random data plus edge cases placed in distinct tiles."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g, dtype=torch.float32)
    x2 = x.view(-1, shape[-1])
    m, k = x2.shape
    if kind == "edge":
        x2[: min(m, BLK), : min(k, BLK)] = 0.0  # zero tile (also zero rows/cols)
        if m > BLK:
            x2[BLK:, : min(k, BLK)] *= 1e30  # huge tile
        if k > BLK:
            x2[: min(m, BLK), BLK : 2 * BLK] *= 1e-30  # tiny tile
            x2[3, BLK + 5] = math.inf
            x2[7, BLK + 9] = -math.inf
        x2[m - 1, k - 1] = math.nan
        x2[m - 2, k - 3] = -0.0
        x2[m - 1, k // 2] = -2.5e-38  # near the fp32 normal limit
        x2[0, k - 1] = -1000.0
    elif kind == "tiny":
        x2.mul_(1e-38)  # scale = fp8_max / amax overflows fp32
    elif kind == "mixed":
        x2.mul_(torch.logspace(-20, 20, k, dtype=torch.float32))  # mixed magnitudes along K
    return x.to(dtype)


# --------------------------------------------------------------------------- blockwise reference


def ref_blockwise(x, fmt, block_dim, pow2, eps=0.0):
    """Expected (row q, row scale_inv, col q, col scale_inv), logical layouts.

    q tensors are (M, K) bytes; scale_inv are (M_tiles, K_tiles) for 2D, (M, K_tiles)
    for 1x128 and (M_tiles, K) for 128x1.
    """
    x32 = x.reshape(-1, x.shape[-1]).float()
    m, k = x32.shape
    vinf = torch.finfo(x.dtype).max
    fmax = FP8_MAX[fmt]
    mt, kt = cdiv(m, BLK), cdiv(k, BLK)

    def quant(tiles):
        """tiles: list of (row slice, col slice); returns (q, per-tile scale_inv list)."""
        smap = torch.empty_like(x32)
        sinv = []
        for rs, cs in tiles:
            s = ref_scale(nan_free_amax(x32[rs, cs]), fmax, pow2, eps, vinf)
            smap[rs, cs] = s
            sinv.append(f32(1.0 / s))
        return ref_encode(x32 * smap, fmt), sinv

    if block_dim == 2:
        tiles = [
            (slice(i * BLK, (i + 1) * BLK), slice(j * BLK, (j + 1) * BLK)) for i in range(mt) for j in range(kt)
        ]
        q, s = quant(tiles)
        s = torch.tensor(s, dtype=torch.float32).view(mt, kt)
        return q, s, q, s
    row_tiles = [(slice(r, r + 1), slice(j * BLK, (j + 1) * BLK)) for r in range(m) for j in range(kt)]
    qr, sr = quant(row_tiles)
    col_tiles = [(slice(i * BLK, (i + 1) * BLK), slice(c, c + 1)) for i in range(mt) for c in range(k)]
    qc, sc = quant(col_tiles)
    return (
        qr,
        torch.tensor(sr, dtype=torch.float32).view(m, kt),
        qc,
        torch.tensor(sc, dtype=torch.float32).view(mt, k),
    )


def ref_dequant(q, sinv_map, fmt, dtype):
    return (ref_decode(q, fmt) * sinv_map).to(dtype)


def expand_2d(s, m, k):
    return s.repeat_interleave(BLK, 0).repeat_interleave(BLK, 1)[:m, :k]


# --------------------------------------------------------------------------- blockwise tests

CASES_2D = [
    ((256, 384), torch.float32, E4M3, True, "edge"),
    ((256, 384), torch.bfloat16, E4M3, False, "edge"),
    ((300, 200), torch.bfloat16, E5M2, True, "random"),
    ((300, 200), torch.float32, E5M2, False, "edge"),
    ((2, 130, 256), torch.float32, E4M3, False, "mixed"),
    ((128, 256), torch.bfloat16, E4M3, False, "tiny"),
    ((128, 256), torch.float32, E4M3, True, "tiny"),
    ((128, 128), torch.float16, E4M3, False, "random"),
]


@pytest.mark.parametrize("shape,dtype,fmt,pow2,kind", CASES_2D)
def test_blockwise_2d(shape, dtype, fmt, pow2, kind):
    x = make_input(shape, dtype, kind)
    q = te.Float8BlockQuantizer(fmt, rowwise=True, columnwise=True, force_pow_2_scales=pow2)
    t = q(x)
    m, k = x.numel() // shape[-1], shape[-1]
    mt, kt = cdiv(m, BLK), cdiv(k, BLK)
    qr, sr, _, _ = ref_blockwise(x, fmt, 2, pow2)

    assert isinstance(t, te.Float8BlockwiseQTensor) and t._is_2D_scaled
    assert t.shape == x.shape and t.dtype == dtype and t.device == x.device
    assert t._rowwise_data.dtype == torch.uint8 and t._rowwise_data.shape == x.shape
    assert t._rowwise_scale_inv.shape == (mt, r4(kt))
    assert t._columnwise_scale_inv.shape == (kt, r4(mt))
    assert t._columnwise_data.shape == (k,) + tuple(shape[:-1])
    assert_bytes_equal(t._rowwise_data.reshape(m, k), qr)
    assert_bytes_equal(t._columnwise_data.reshape(k, m), qr.t().contiguous())
    assert_f32_equal(t._rowwise_scale_inv[:, :kt], sr)
    assert_f32_equal(t._columnwise_scale_inv[:, :mt], sr.t().contiguous())
    if pow2:
        assert all(math.frexp(v)[0] == 0.5 for v in sr.reshape(-1).tolist())  # powers of two

    expect = ref_dequant(qr, expand_2d(sr, m, k), fmt, dtype).reshape(shape)
    assert_same_values(t.dequantize(), expect)
    expect32 = ref_dequant(qr, expand_2d(sr, m, k), fmt, torch.float32).reshape(shape)
    assert_same_values(t.dequantize(dtype=torch.float32), expect32)
    t.update_usage(rowwise_usage=False)  # columnwise-only dequantize transposes back
    assert t._rowwise_data is None
    assert_same_values(t.dequantize(), expect)


CASES_1D = [
    ((256, 384), torch.float32, E4M3, True, False, "edge"),
    ((256, 384), torch.bfloat16, E4M3, False, True, "edge"),
    ((200, 300), torch.bfloat16, E5M2, True, True, "random"),
    ((200, 300), torch.float32, E5M2, False, False, "mixed"),
    ((3, 50, 256), torch.float32, E4M3, False, True, "edge"),
    ((130, 128), torch.bfloat16, E4M3, True, False, "tiny"),
]


@pytest.mark.parametrize("shape,dtype,fmt,pow2,compact,kind", CASES_1D)
def test_blockwise_1d(shape, dtype, fmt, pow2, compact, kind):
    x = make_input(shape, dtype, kind, seed=1)
    q = te.Float8BlockQuantizer(
        fmt, rowwise=True, columnwise=True, force_pow_2_scales=pow2, block_scaling_dim=1, all_gather_usage=compact
    )
    t = q(x)
    m, k = x.numel() // shape[-1], shape[-1]
    mt, kt = cdiv(m, BLK), cdiv(k, BLK)
    qr, sr, qc, sc = ref_blockwise(x, fmt, 1, pow2)

    assert not t._is_2D_scaled
    fmt_enum = te.Float8BlockScaleTensorFormat
    assert t._data_format == (fmt_enum.COMPACT if compact else fmt_enum.GEMM_READY)
    assert_bytes_equal(t._rowwise_data.reshape(m, k), qr)
    if compact:
        assert t._rowwise_scale_inv.shape == (m, kt)
        assert t._columnwise_scale_inv.shape == (mt, k)
        assert t._columnwise_data.shape == x.shape  # not transposed
        assert_f32_equal(t._rowwise_scale_inv, sr)
        assert_f32_equal(t._columnwise_scale_inv, sc)
        assert_bytes_equal(t._columnwise_data.reshape(m, k), qc)
    else:
        assert t._rowwise_scale_inv.shape == (kt, r4(m))  # GEMM-ready: transposed
        assert t._columnwise_scale_inv.shape == (mt, r4(k))
        assert t._columnwise_data.shape == (k,) + tuple(shape[:-1])
        assert_f32_equal(t._rowwise_scale_inv[:, :m], sr.t().contiguous())
        assert_f32_equal(t._columnwise_scale_inv[:, :k], sc)
        assert_bytes_equal(t._columnwise_data.reshape(k, m), qc.t().contiguous())

    row_map = sr.repeat_interleave(BLK, 1)[:, :k]
    col_map = sc.repeat_interleave(BLK, 0)[:m]
    assert_same_values(t.dequantize(), ref_dequant(qr, row_map, fmt, dtype).reshape(shape))
    t.update_usage(rowwise_usage=False)
    assert_same_values(t.dequantize(), ref_dequant(qc, col_map, fmt, dtype).reshape(shape))
    with pytest.raises(RuntimeError):
        t.update_usage(rowwise_usage=True)  # 1D scales differ per direction


def test_blockwise_amax_epsilon_and_rowwise_only():
    x = make_input((256, 256), torch.float32, "edge", seed=3)
    eps = 1e-4
    q = te.Float8BlockQuantizer(E4M3, rowwise=True, amax_epsilon=eps, force_pow_2_scales=False)
    t = q(x)
    assert t._columnwise_data is None and t._columnwise_scale_inv is None
    qr, sr, _, _ = ref_blockwise(x, E4M3, 2, False, eps=eps)
    assert_bytes_equal(t._rowwise_data, qr)
    assert_f32_equal(t._rowwise_scale_inv[:, :2], sr)
    assert sr[0, 0].item() == f32(1.0 / f32(448.0 / f32(eps)))  # zero tile uses eps, not 1

    # 2D: the columnwise copy can be derived from rowwise data (same tile scales).
    t.update_usage(rowwise_usage=True, columnwise_usage=True)
    both = te.Float8BlockQuantizer(E4M3, rowwise=True, columnwise=True, amax_epsilon=eps, force_pow_2_scales=False)(x)
    assert_bytes_equal(t._columnwise_data, both._columnwise_data)
    assert_f32_equal(t._columnwise_scale_inv[:, :2], both._columnwise_scale_inv[:, :2])


def test_make_empty_shapes_and_padding_is_uninitialised():
    q = te.Float8BlockQuantizer(te.TE_DType.kFloat8E4M3, rowwise=True, columnwise=True, block_scaling_dim=1)
    t = q.make_empty((5, 7, 384), dtype=torch.bfloat16, device="cpu")
    assert t.dtype == torch.bfloat16 and t.shape == (5, 7, 384)
    assert t._rowwise_scale_inv.shape == (3, 36) and t._columnwise_scale_inv.shape == (1, 384)
    assert t._columnwise_data.shape == (384, 5, 7)
    q2 = te.Float8BlockQuantizer(te.tex_DType.kFloat8E5M2, block_scaling_dim=1, all_gather_usage=True)
    assert q2.make_empty((35, 384), device="cpu")._rowwise_scale_inv.shape == (35, 3)
    # Only the valid region is written: a poisoned buffer keeps its padding.
    t = te.Float8BlockQuantizer(E4M3).make_empty((128, 128), device="cpu")
    t._rowwise_scale_inv.fill_(-7.0)
    t.quantize_(torch.ones(128, 128))
    assert t._rowwise_scale_inv[0, 1:].eq(-7.0).all()
    assert t._rowwise_scale_inv[0, 0].item() == 1.0 / 256.0  # amax 1 -> scale 448 -> pow2 256


def test_invalid_arguments_raise():
    with pytest.raises(ValueError, match="block_scaling_dim"):
        te.Float8BlockQuantizer(E4M3, block_scaling_dim=3)
    with pytest.raises(ValueError, match="all_gather_usage"):
        te.Float8BlockQuantizer(E4M3, block_scaling_dim=2, all_gather_usage=True)
    with pytest.raises(ValueError, match="fp8_dtype"):
        te.Float8BlockQuantizer(torch.bfloat16)
    with pytest.raises(ValueError, match="32"):
        te.MXFP8Quantizer(E4M3)(torch.randn(64, 48))
    with pytest.raises(ValueError, match=r"\(48, 64\)"):
        te.MXFP8Quantizer(E4M3).make_empty((48, 64), device="cpu")
    q = te.Float8BlockQuantizer(E4M3)
    with pytest.raises(ValueError, match="shape"):
        q.update_quantized(torch.randn(128, 256), q.make_empty((128, 128), device="cpu"))
    # Partial tiles are accepted (TE's "notaligned" kernels); is_quantizable reports alignment.
    assert not q.is_quantizable(torch.empty(100, 128)) and q.is_quantizable(torch.empty(256, 128))


# --------------------------------------------------------------------------- per-tensor


def test_fp8_encoding_edge_values():
    vals = [448.0, 464.0, 465.0, 1e9, math.inf, -math.inf, math.nan, 2.0**-10, 3 * 2.0**-10, -1e-10, -0.0, 0.0]
    x = torch.tensor(vals, dtype=torch.float32)
    one = torch.ones(1)
    t = te.Float8Quantizer(one, torch.zeros(1), E4M3, columnwise=False)(x)
    want = [0x7E, 0x7E, 0x7E, 0x7E, 0x7E, 0xFE, 0x7F, 0x00, 0x02, 0x80, 0x80, 0x00]
    assert t._data.tolist() == want
    assert_bytes_equal(t._data, ref_encode(x, E4M3))
    t = te.Float8Quantizer(one, torch.zeros(1), E5M2, columnwise=False)(x * 128)
    assert t._data[:7].tolist() == [0x7B, 0x7B, 0x7B, 0x7B, 0x7B, 0xFB, 0x7F]  # 448 * 128 = max
    assert_bytes_equal(t._data, ref_encode(x * 128, E5M2))


@pytest.mark.parametrize(
    "dtype,fmt,pow2,eps,kind",
    [
        (torch.float32, E4M3, False, 0.0, "edge"),
        (torch.bfloat16, E5M2, True, 0.0, "random"),
        (torch.float32, E4M3, True, 0.0, "tiny"),
        (torch.bfloat16, E4M3, False, 1e-3, "mixed"),
    ],
)
def test_current_scaling(dtype, fmt, pow2, eps, kind):
    x = make_input((3, 96, 160), dtype, kind, seed=5)
    q = te.Float8CurrentScalingQuantizer(fmt, torch.device("cpu"), force_pow_2_scales=pow2, amax_epsilon=eps)
    t = q(x)
    amax = nan_free_amax(x)
    s = ref_scale(amax, FP8_MAX[fmt], pow2, eps, torch.finfo(torch.float32).max)
    qd = ref_encode(x.float() * s, fmt)
    assert isinstance(t, te.Float8Tensor) and t.dtype == dtype
    assert t._scale_inv.shape == (1,)
    assert_bytes_equal(t._data, qd)
    assert t._transpose.shape == (160, 3, 96)
    assert_bytes_equal(t._transpose.reshape(160, -1), qd.reshape(-1, 160).t().contiguous())
    assert bits(t._scale_inv.item()) == bits(f32(1.0 / s))
    assert bits(q.scale.item()) == bits(s) and q.amax.item() == f32(amax)
    assert_same_values(t.dequantize(), (ref_decode(qd, fmt) * f32(1.0 / s)).to(dtype))


def test_delayed_scaling():
    x = make_input((64, 256), torch.bfloat16, "edge", seed=6)
    scale = torch.tensor([3.7])
    amax = torch.tensor([0.5])
    q = te.Float8Quantizer(scale, amax, te.TE_DType.kFloat8E4M3)
    t = q(x)
    s = f32(3.7)
    qd = ref_encode(x.float() * s, E4M3)
    assert_bytes_equal(t._data, qd)
    assert_bytes_equal(t._transpose, qd.t().contiguous())
    assert bits(t._scale_inv.item()) == bits(f32(1.0 / s))
    assert amax.item() == f32(nan_free_amax(x))  # max-ed into the quantizer's amax
    t.update_usage(rowwise_usage=False)
    assert t._data is None
    assert_same_values(t.dequantize(dtype=torch.float32), ref_decode(qd, E4M3) * f32(1.0 / s))


# --------------------------------------------------------------------------- MXFP8


def ref_e8m0(val: float) -> int:
    if math.isnan(val):
        return 0xFF
    if math.isinf(val):
        return 0xFE
    if val == 0.0:
        return 0
    b = bits(val)
    e, man = b >> 23, b & 0x7FFFFF
    if man > 0 and e != 0xFE and not (e == 0 and man <= 0x400000):
        e += 1
    return e


def ref_mxfp8(x2, fmt, along_rows):
    """Per 1x32 (rowwise) or 32x1 (columnwise) block: (q bytes, e8m0 scales)."""
    m, k = x2.shape
    rcp = f32(1.0 / FP8_MAX[fmt])
    mult = torch.empty_like(x2)
    nb = (m, k // 32) if along_rows else (m // 32, k)
    scales = torch.empty(nb, dtype=torch.uint8)
    for i in range(nb[0]):
        for j in range(nb[1]):
            if along_rows:
                rs, cs = slice(i, i + 1), slice(32 * j, 32 * j + 32)
            else:
                rs, cs = slice(32 * i, 32 * i + 32), slice(j, j + 1)
            e = ref_e8m0(f32(nan_free_amax(x2[rs, cs]) * rcp))
            scales[i, j] = e
            mult[rs, cs] = 1.0 if e == 0 else from_bits((254 - e) << 23)
    return ref_encode(x2 * mult, fmt), scales


@pytest.mark.parametrize(
    "shape,dtype,fmt,kind",
    [
        ((64, 96), torch.float32, E4M3, "random"),
        ((2, 32, 320), torch.bfloat16, E4M3, "edge"),
        ((160, 256), torch.float32, E5M2, "edge"),
        ((32, 64), torch.float32, E4M3, "tiny"),
    ],
)
def test_mxfp8(shape, dtype, fmt, kind):
    x = make_input(shape, dtype, kind, seed=7)
    t = te.MXFP8Quantizer(fmt)(x)
    m, k = x.numel() // shape[-1], shape[-1]
    x2 = x.reshape(m, k).float()
    qr, er = ref_mxfp8(x2, fmt, True)
    qc, ec = ref_mxfp8(x2, fmt, False)
    assert t._rowwise_scale_inv.dtype == torch.uint8
    assert t._rowwise_scale_inv.shape == (cdiv(m, 128) * 128, r4(k // 32))
    assert t._columnwise_scale_inv.shape == (r4(m // 32), cdiv(k, 128) * 128)
    assert t._columnwise_data.shape == x.shape
    assert_bytes_equal(t._rowwise_data.reshape(m, k), qr)
    assert_bytes_equal(t._rowwise_scale_inv[:m, : k // 32], er)
    assert_bytes_equal(t._columnwise_data.reshape(m, k), qc)
    assert_bytes_equal(t._columnwise_scale_inv[: m // 32, :k], ec)

    def scale_map(e, rows):
        s = torch.tensor([from_bits(v << 23) for v in e.reshape(-1).tolist()]).view(e.shape)
        return s.repeat_interleave(32, 0 if rows else 1)

    expect_r = (ref_decode(qr, fmt) * scale_map(er, False)).to(dtype).reshape(shape)
    assert_same_values(t.dequantize(), expect_r)
    t.update_usage(rowwise_usage=False)
    expect_c = (ref_decode(qc, fmt) * scale_map(ec, True)).to(dtype).reshape(shape)
    assert_same_values(t.dequantize(), expect_c)


# --------------------------------------------------------------------------- QuantizedTensor dispatch


def test_unimplemented_op_dequantizes():
    x = make_input((256, 256), torch.bfloat16, "random", seed=8)
    for q in (
        te.Float8BlockQuantizer(E4M3),
        te.Float8BlockQuantizer(E4M3, block_scaling_dim=1),
        te.Float8CurrentScalingQuantizer(E4M3, "cpu"),
        te.MXFP8Quantizer(E4M3),
    ):
        t = q(x)
        d = t.dequantize()
        y = torch.add(t, 1)
        assert type(y) is torch.Tensor and y.dtype == torch.bfloat16
        assert torch.equal(y, d + 1)
        assert torch.equal(t * 2, d * 2)
        assert torch.equal(t.float(), d.float())
        assert torch.equal(torch.matmul(t, x), torch.matmul(d, x))


def test_copy_into_requantizes_in_place():
    x = make_input((256, 384), torch.float32, "random", seed=9)
    y = make_input((256, 384), torch.float32, "edge", seed=10)
    q = te.Float8BlockQuantizer(E4M3, rowwise=True, columnwise=True)
    t = q(x)
    ptrs = (t._rowwise_data.data_ptr(), t._rowwise_scale_inv.data_ptr(), t._columnwise_data.data_ptr())
    t.copy_(y)
    assert ptrs == (t._rowwise_data.data_ptr(), t._rowwise_scale_inv.data_ptr(), t._columnwise_data.data_ptr())
    fresh = q(y)
    assert_bytes_equal(t._rowwise_data, fresh._rowwise_data)
    assert_bytes_equal(t._columnwise_data, fresh._columnwise_data)
    assert_f32_equal(t._rowwise_scale_inv[:, :3], fresh._rowwise_scale_inv[:, :3])

    # Copy out of a quantized tensor gives its dequantized values.
    out = torch.empty(256, 384)
    out.copy_(t)
    assert_same_values(out, t.dequantize(dtype=torch.float32))

    # In-place op: dequantize, run, quantize back into the same buffers.
    before = t.dequantize()
    t.mul_(2)
    assert ptrs[0] == t._rowwise_data.data_ptr()
    assert_bytes_equal(t._rowwise_data, q(before * 2)._rowwise_data)

    # quantize_ with a noop flag of 1 leaves the buffers untouched.
    snap = t._rowwise_data.clone()
    t.quantize_(x, noop_flag=torch.ones(1))
    assert_bytes_equal(t._rowwise_data, snap)


def test_detach_view_clone():
    x = make_input((64, 256), torch.bfloat16, "random", seed=11)
    t = te.Float8BlockQuantizer(E4M3)(x)
    d = t.detach()
    assert type(d) is te.Float8BlockwiseQTensor and d._rowwise_data is t._rowwise_data
    v = t.view(64, 256)
    assert type(v) is te.Float8BlockwiseQTensor and v._rowwise_data is t._rowwise_data
    with pytest.raises(NotImplementedError):
        t.view(128, 128)
    c = t.clone()
    assert c._rowwise_data.data_ptr() != t._rowwise_data.data_ptr()
    assert torch.equal(c.dequantize(), t.dequantize())

    f = te.Float8CurrentScalingQuantizer(E4M3, "cpu")(x)
    fv = f.view(2, 32, 256)
    assert type(fv) is te.Float8Tensor and fv.shape == (2, 32, 256)
    assert torch.equal(fv.dequantize(), f.dequantize().view(2, 32, 256))
    mx = te.MXFP8Quantizer(E4M3)(x).view(2, 32, 256)
    assert torch.equal(mx.dequantize(), te.MXFP8Quantizer(E4M3)(x).dequantize().view(2, 32, 256))


class LoggingTensor(torch.Tensor):
    """Stand-in for simdist's device-tensor subclass: wraps and logs every aten op."""

    log = []

    @staticmethod
    def __new__(cls, elem):
        self = torch.Tensor._make_wrapper_subclass(
            cls, elem.shape, strides=elem.stride(), dtype=elem.dtype, device=elem.device
        )
        self.elem = elem
        return self

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        cls.log.append(func)
        unwrap = lambda a: a.elem if isinstance(a, LoggingTensor) else a  # noqa: E731
        out = func(*[unwrap(a) for a in args], **{k: unwrap(v) for k, v in (kwargs or {}).items()})
        if func._schema.is_mutable and args and isinstance(args[0], LoggingTensor):
            return args[0]
        if isinstance(out, torch.Tensor):
            return LoggingTensor(out)
        if isinstance(out, (tuple, list)):
            return type(out)(LoggingTensor(o) if isinstance(o, torch.Tensor) else o for o in out)
        return out


def test_nests_over_other_tensor_subclass():
    x = make_input((128, 256), torch.bfloat16, "random", seed=12)
    plain = te.Float8BlockQuantizer(E4M3, rowwise=True, columnwise=True)(x)
    meta = plain.get_metadata()
    for name in ("rowwise_data", "rowwise_scale_inv", "columnwise_data", "columnwise_scale_inv"):
        meta[name] = LoggingTensor(meta[name].clone())
    t = te.Float8BlockwiseQTensor(shape=x.shape, dtype=x.dtype, **meta)

    LoggingTensor.log.clear()
    y = torch.add(t, 1)
    assert type(y) is LoggingTensor and aten_name(LoggingTensor.log, "add")
    assert torch.equal(y.elem, plain.dequantize() + 1)

    # copy_ re-quantizes into the inner subclass buffers through its own dispatch.
    x2 = make_input((128, 256), torch.bfloat16, "edge", seed=13)
    LoggingTensor.log.clear()
    t.copy_(x2)
    assert aten_name(LoggingTensor.log, "copy_")
    fresh = te.Float8BlockQuantizer(E4M3, rowwise=True, columnwise=True)(x2)
    assert_bytes_equal(t._rowwise_data.elem, fresh._rowwise_data)
    assert_bytes_equal(t._columnwise_data.elem, fresh._columnwise_data)
    assert_f32_equal(t._rowwise_scale_inv.elem[:, :2], fresh._rowwise_scale_inv[:, :2])


def aten_name(log, name):
    return any(f.overloadpacket.__name__ == name for f in log)


# --------------------------------------------------------------------------- recipe / env


def test_recipe_and_env(monkeypatch):
    monkeypatch.delenv("NVTE_FP8_BLOCK_SCALING_FP32_SCALES", raising=False)
    assert te.blockwise_fp32_scales_from_env() is False
    monkeypatch.setenv("NVTE_FP8_BLOCK_SCALING_FP32_SCALES", "1")
    assert te.blockwise_fp32_scales_from_env() is True

    # The recipe reads the variable once, at import: load a fresh copy with it set.
    spec = importlib.util.spec_from_file_location("_te_fake_fp32", te.__file__)
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, mod)  # dataclasses look the module up
    spec.loader.exec_module(mod)
    r = mod.Float8BlockScaling()
    assert (r.x_block_scaling_dim, r.w_block_scaling_dim, r.grad_block_scaling_dim) == (1, 2, 1)
    assert r.fp8_quant_fwd_weight.power_2_scale is False and r.use_f32_scales is True
    r0 = te.Float8BlockScaling()
    assert r0.fp8_quant_fwd_weight.power_2_scale is (not r0.use_f32_scales)
    with pytest.raises(ValueError):
        te.Float8BlockScaling(x_block_scaling_dim=2)
