"""Where a GPU's semantics differ from the CPU kernels simdist runs (differential tier, series d14+): deterministic
mode (alerts, the cuBLAS workspace check, filled uninitialized memory), dtype support per op, TF32 and reduced-
precision matmuls, autocast output dtypes, type promotion with host scalars. Runs as a plain script on a GPU and
under simdist (`FACTS_OUT=sim.json simdist run ci/gpu_d_facts.py`) to compare; FACTS_OUT=file writes the JSON.
Section "cublas" runs in a child process without CUBLAS_WORKSPACE_CONFIG (torch reads it once, at the first gemm).
"""
import hashlib, json, os, subprocess, sys, warnings
import torch
import torch.nn.functional as F

SECTION = os.environ.get("D_SECTION", "all")
dev = "cuda"


def h(t):
    if isinstance(t, (tuple, list)):
        return "|".join(h(x) for x in t)
    if not isinstance(t, torch.Tensor):
        return repr(t)[:40]
    c = t.detach().to("cpu").contiguous()
    b = c.reshape(-1).view(torch.uint8) if c.numel() else torch.zeros(0, dtype=torch.uint8)
    return f"{c.dtype}{tuple(c.shape)}:" + hashlib.sha1(b.numpy().tobytes()).hexdigest()[:8]


def outcome(fn, show=h):
    try:
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            r = fn()
            torch.cuda.synchronize()
            r = show(r)
        ws = [f"{m.category.__name__}: {str(m.message)[:70]}" for m in w
              if "deterministic" in str(m.message) or "CuBLAS" in str(m.message) or "autocast" in str(m.message)]
        return [r] + ws[:1]
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__}: {str(e)[:90]}"


def base(dtype=torch.float32, shape=(2, 3)):
    return torch.arange(1, 1 + torch.Size(shape).numel(), dtype=torch.float32).view(shape).to(dtype).to(dev)


def rg(*shape, seed=0, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype).to(dev).requires_grad_()


def bw(f, *shape, seed=0):
    def run():
        x = rg(*shape, seed=seed)
        y = f(x)
        y.backward(torch.ones_like(y))
        return x.grad
    return run


idx = lambda *v: torch.tensor(v, device=dev)  # noqa: E731


def det_cases():
    z = lambda n=5, dt=torch.float32: torch.zeros(n, dtype=dt, device=dev)  # noqa: E731
    s = lambda n=4, dt=torch.float32: torch.arange(1., n + 1).to(dt).to(dev)  # noqa: E731
    i4 = idx(0, 1, 1, 3)
    img = lambda: rg(1, 2, 6, 6)  # noqa: E731
    return {
        "index_add_f": lambda: z().index_add_(0, i4, s()),
        "index_add_i": lambda: z(dt=torch.int64).index_add_(0, i4, s(dt=torch.int64)),
        "scatter_add_f": lambda: z().scatter_add_(0, i4, s()),
        "scatter_reduce_sum": lambda: z().scatter_reduce_(0, i4, s(), "sum"),
        "scatter_reduce_mean": lambda: z().scatter_reduce_(0, i4, s(), "mean"),
        "scatter_reduce_prod": lambda: z().scatter_reduce_(0, i4, s(), "prod"),
        "scatter_reduce_amax": lambda: z().scatter_reduce_(0, i4, s(), "amax"),
        "scatter_src": lambda: z().scatter_(0, i4, s()),
        "scatter_value": lambda: z().scatter_(0, i4, 2.0),
        "index_put_acc": lambda: z().index_put_((i4,), s(), accumulate=True),
        "index_put_noacc": lambda: z().index_put_((i4,), s(), accumulate=False),
        "index_put_acc_i": lambda: z(dt=torch.int64).index_put_((i4,), s(dt=torch.int64), accumulate=True),
        "put_acc": lambda: z().put_(i4, s(), accumulate=True),
        "put_noacc": lambda: z().put_(i4, s(), accumulate=False),
        "index_copy": lambda: z().index_copy_(0, i4, s()),
        "index_fill": lambda: z().index_fill_(0, i4, 1.0),
        "index_reduce_prod": lambda: z().index_reduce_(0, i4, s(), "prod"),
        "masked_scatter": lambda: z().masked_scatter_(z() == 0, s(5)),
        "histc_f": lambda: torch.histc(s(), 4),
        "histc_i": lambda: torch.histc(s(dt=torch.int64), 4),
        "bincount": lambda: torch.bincount(i4),
        "bincount_w": lambda: torch.bincount(i4, weights=s()),
        "kthvalue": lambda: torch.kthvalue(s(), 2),
        "median_all": lambda: torch.median(s()),
        "median_dim": lambda: torch.median(s(), 0),
        "nanmedian_dim": lambda: torch.nanmedian(s(), 0),
        "nanmedian_all": lambda: torch.nanmedian(s()),
        "mode": lambda: torch.mode(s()),
        "cumsum_f": lambda: torch.cumsum(s(), 0),
        "cumsum_h": lambda: torch.cumsum(s(dt=torch.float16), 0),
        "cumsum_i": lambda: torch.cumsum(s(dt=torch.int64), 0),
        "cumsum_c": lambda: torch.cumsum(s(dt=torch.complex64), 0),
        "cumsum_f_to_i": lambda: torch.cumsum(s(dt=torch.int32), 0, dtype=torch.float32),
        "cumsum_bw": bw(lambda x: x.cumsum(0), 4),
        "cumprod_f": lambda: torch.cumprod(s(), 0),
        "logcumsumexp": lambda: torch.logcumsumexp(s(), 0),
        "cummax": lambda: torch.cummax(s(), 0),
        "sum_f": lambda: s().sum(),
        "nll_mean": lambda: F.nll_loss(torch.randn(3, 4).log_softmax(-1).to(dev), idx(0, 1, 3)),
        "nll_sum": lambda: F.nll_loss(torch.randn(3, 4).log_softmax(-1).to(dev), idx(0, 1, 3), reduction="sum"),
        "nll_none": lambda: F.nll_loss(torch.randn(3, 4).log_softmax(-1).to(dev), idx(0, 1, 3), reduction="none"),
        "nll2d_mean": lambda: F.nll_loss(torch.randn(1, 3, 2, 2).to(dev), torch.zeros(1, 2, 2, dtype=torch.long, device=dev)),
        "nll2d_none": lambda: F.nll_loss(torch.randn(1, 3, 2, 2).to(dev), torch.zeros(1, 2, 2, dtype=torch.long, device=dev), reduction="none"),
        "cross_entropy": lambda: F.cross_entropy(torch.randn(3, 4).to(dev), idx(0, 1, 3)),
        "cross_entropy_probs": lambda: F.cross_entropy(torch.randn(3, 4).to(dev), torch.rand(3, 4).to(dev)),
        "nll_bw": bw(lambda x: F.nll_loss(x, idx(0, 1, 3)), 3, 4),
        "emb_bag_max_bw": lambda: _emb_bag("max"),
        "emb_bag_sum_bw": lambda: _emb_bag("sum"),
        "emb_bag_mean_bw": lambda: _emb_bag("mean"),
        "embedding_bw": bw(lambda w: F.embedding(idx(0, 1, 1, 3), w), 5, 2),
        "embedding_freq_bw": bw(lambda w: F.embedding(idx(0, 1, 1, 3), w, scale_grad_by_freq=True), 5, 2),
        "avg_pool3d_bw": bw(lambda x: F.avg_pool3d(x, 2), 1, 1, 4, 4, 4),
        "avg_pool2d_bw": bw(lambda x: F.avg_pool2d(x, 2), 1, 2, 6, 6),
        "adaptive_avg2d_fw": lambda: F.adaptive_avg_pool2d(img(), 3),
        "adaptive_avg2d_bw": bw(lambda x: F.adaptive_avg_pool2d(x, 3), 1, 2, 6, 6),
        "adaptive_avg3d_bw": bw(lambda x: F.adaptive_avg_pool3d(x, 2), 1, 1, 4, 4, 4),
        "adaptive_max2d_bw": bw(lambda x: F.adaptive_max_pool2d(x, 3), 1, 2, 6, 6),
        "adaptive_max1d_bw": bw(lambda x: F.adaptive_max_pool1d(x, 3), 1, 2, 6),
        "max_pool2d_bw": bw(lambda x: F.max_pool2d(x, 2), 1, 2, 6, 6),
        "max_pool3d_bw": bw(lambda x: F.max_pool3d(x, 2), 1, 1, 4, 4, 4),
        "max_unpool2d": lambda: F.max_unpool2d(*F.max_pool2d(base(shape=(1, 1, 4, 4)), 2, return_indices=True), 2),
        "max_unpool1d": lambda: F.max_unpool1d(*F.max_pool1d(base(shape=(1, 1, 4)), 2, return_indices=True), 2),
        "interp_bilinear_fw": lambda: F.interpolate(img(), scale_factor=2, mode="bilinear"),
        "interp_bilinear_bw": bw(lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"), 1, 2, 3, 3),
        "interp_linear_bw": bw(lambda x: F.interpolate(x, scale_factor=2, mode="linear"), 1, 2, 3),
        "interp_bicubic_bw": bw(lambda x: F.interpolate(x, scale_factor=2, mode="bicubic"), 1, 2, 3, 3),
        "interp_nearest_bw": bw(lambda x: F.interpolate(x, scale_factor=2, mode="nearest"), 1, 2, 3, 3),
        "reflect_pad1d_bw": bw(lambda x: F.pad(x, (1, 1), mode="reflect"), 1, 2, 4),
        "reflect_pad2d_bw": bw(lambda x: F.pad(x, (1, 1, 1, 1), mode="reflect"), 1, 2, 4, 4),
        "replicate_pad1d_bw": bw(lambda x: F.pad(x, (1, 1), mode="replicate"), 1, 2, 4),
        "replicate_pad2d_bw": bw(lambda x: F.pad(x, (1, 1, 1, 1), mode="replicate"), 1, 2, 4, 4),
        "replicate_pad3d_bw": bw(lambda x: F.pad(x, (1, 1, 1, 1, 1, 1), mode="replicate"), 1, 1, 3, 3, 3),
        "grid_sample_bw": bw(lambda x: F.grid_sample(x, torch.zeros(1, 2, 2, 2, device=dev), align_corners=False), 1, 1, 3, 3),
        "ctc_bw": bw(lambda x: F.ctc_loss(x.log_softmax(-1), idx(1, 2), idx(4), idx(2)), 4, 1, 3),
        "gather_bw": bw(lambda x: x.gather(0, i4), 5),
        "index_select_bw": bw(lambda x: x.index_select(0, i4), 5),
        "repeat_interleave_bw": bw(lambda x: x.repeat_interleave(2), 3),
        "getitem_list_bw": bw(lambda x: x[[i4]], 5),
        "getitem_tensor_bw": bw(lambda x: x[i4], 5),
        "mm_f32": lambda: base() @ base().T,
        "mm_f16": lambda: base(torch.float16) @ base(torch.float16).T,
        "mm_bf16": lambda: base(torch.bfloat16) @ base(torch.bfloat16).T,
        "mm_f64": lambda: base(torch.float64) @ base(torch.float64).T,
        "bmm": lambda: torch.bmm(base()[None], base().T[None]),
        "addmm": lambda: torch.addmm(torch.ones(2, 2, device=dev), base(), base().T),
        "linear": lambda: F.linear(base(), base()),
        "linear_bias": lambda: F.linear(base(), base(), torch.ones(2, device=dev)),
        "mv": lambda: torch.mv(base(), torch.ones(3, device=dev)),
        "dot": lambda: torch.dot(torch.ones(3, device=dev), torch.ones(3, device=dev)),
        "matmul_1d": lambda: torch.ones(3, device=dev) @ torch.ones(3, device=dev),
        "einsum": lambda: torch.einsum("ij,kj->ik", base(), base()),
        "baddbmm": lambda: torch.baddbmm(torch.ones(1, 2, 2, device=dev), base()[None], base().T[None]),
        "conv2d": lambda: F.conv2d(img(), torch.ones(3, 2, 3, 3, device=dev)),
        "conv2d_bw": bw(lambda x: F.conv2d(x, torch.ones(3, 2, 3, 3, device=dev)), 1, 2, 6, 6),
        "linear_bw": bw(lambda x: F.linear(x, torch.ones(2, 3, device=dev)), 4, 3),
        "sort": lambda: torch.sort(s()),
        "topk": lambda: torch.topk(s(), 2),
        "unique": lambda: torch.unique(i4),
        "sdpa_bw": bw(lambda q: F.scaled_dot_product_attention(q, q, q), 1, 2, 4, 8),
    }


def _emb_bag(mode):
    w = rg(5, 2)
    y = F.embedding_bag(idx(0, 1, 1, 3), w, idx(0, 2), mode=mode)
    y.backward(torch.ones_like(y))
    return w.grad


def fill_cases():
    out = {}
    for dt in (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.complex64, torch.int8, torch.uint8,
               torch.int32, torch.int64, torch.bool, torch.uint16, torch.uint32, torch.uint64, torch.float8_e4m3fn):
        n = str(dt).split(".")[1]
        out[f"empty_{n}"] = lambda dt=dt: torch.empty(3, dtype=dt, device=dev)
    out["empty_strided"] = lambda: torch.empty_strided((2, 2), (1, 3), device=dev)
    out["empty_like"] = lambda: torch.empty_like(base())
    out["new_empty"] = lambda: base().new_empty((3,))
    out["new_empty_strided"] = lambda: base().new_empty_strided((2,), (2,))
    out["empty_permuted"] = lambda: torch.empty_permuted((2, 3), (1, 0), device=dev)
    out["resize_grow"] = lambda: _resize()
    out["resize_as_grow"] = lambda: torch.ones(2, device=dev).resize_as_(base())
    out["storage_resize"] = lambda: _storage_resize()
    out["cuda_FloatTensor"] = lambda: torch.cuda.FloatTensor(3) if hasattr(torch.cuda, "FloatTensor") else None
    out["out_resize"] = lambda: torch.add(base(), 1, out=torch.empty(0, device=dev))
    return out


def _resize():
    t = torch.ones(2, device=dev)
    t.resize_(5)
    return t


def _storage_resize():
    t = torch.ones(2, device=dev)
    t.untyped_storage().resize_(5 * 4)
    return t.new_empty(0).set_(t.untyped_storage(), 0, (5,), (1,))


DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.uint16, torch.uint32,
          torch.uint64, torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex32, torch.complex64,
          torch.complex128, torch.float8_e4m3fn, torch.float8_e5m2]


def dtype_ops():
    return {
        "add": lambda x: x + x, "sub": lambda x: x - x, "mul": lambda x: x * x, "div": lambda x: x / x,
        "floordiv": lambda x: x // x, "rem": lambda x: x % x, "neg": lambda x: -x, "abs": lambda x: x.abs(),
        "sign": lambda x: x.sign(), "sqrt": lambda x: x.sqrt(), "exp": lambda x: x.exp(), "log": lambda x: x.log(),
        "sin": lambda x: x.sin(), "tanh": lambda x: x.tanh(), "sigmoid": lambda x: x.sigmoid(),
        "relu": lambda x: torch.relu(x), "pow2": lambda x: x.pow(2), "eq": lambda x: x == x, "lt": lambda x: x < x,
        "maximum": lambda x: torch.maximum(x, x), "where": lambda x: torch.where(torch.ones_like(x, dtype=torch.bool), x, x),
        "clamp": lambda x: x.clamp(1, 4), "sum": lambda x: x.sum(), "sum_dim": lambda x: x.sum(1), "prod": lambda x: x.prod(),
        "mean": lambda x: x.mean(), "cumsum": lambda x: x.cumsum(1), "cumprod": lambda x: x.cumprod(1),
        "max": lambda x: x.max(), "max_dim": lambda x: x.max(1), "amax": lambda x: x.amax(1), "argmax": lambda x: x.argmax(),
        "sort": lambda x: x.sort(1), "topk": lambda x: x.topk(2, 1), "argsort": lambda x: x.argsort(1, stable=True),
        "unique": lambda x: torch.unique(x), "nonzero": lambda x: x.nonzero(), "any": lambda x: x.any(), "all": lambda x: x.all(),
        "std": lambda x: x.std(), "norm": lambda x: x.norm(), "softmax": lambda x: x.softmax(1), "matmul": lambda x: x @ x.T,
        "bitand": lambda x: x & x, "bitnot": lambda x: ~x, "lnot": lambda x: x.logical_not(), "fill": lambda x: x.fill_(1),
        "zero": lambda x: x.zero_(), "clone": lambda x: x.clone(), "t_contig": lambda x: x.t().contiguous(),
        "to_f32": lambda x: x.to(torch.float32), "to_i64": lambda x: x.to(torch.int64), "from_f32": lambda x: torch.ones(2, 3, device=dev).to(x.dtype),
        "cat": lambda x: torch.cat([x, x]), "flip": lambda x: x.flip(1), "roll": lambda x: x.roll(1, 1),
        "index_select": lambda x: x.index_select(1, idx(0, 2)), "gather": lambda x: x.gather(1, idx([0, 2], [1, 1])),
        "scatter": lambda x: x.clone().scatter_(1, idx([0], [1]), x[:, :1].clone()), "masked_fill": lambda x: x.masked_fill(x == x, 1),
        "masked_select": lambda x: x.masked_select(x == x), "isnan": lambda x: x.isnan(), "isinf": lambda x: x.isinf(),
        "nan_to_num": lambda x: x.nan_to_num(), "lerp": lambda x: torch.lerp(x, x, 0.5), "addcmul": lambda x: torch.addcmul(x, x, x),
        "fft": lambda x: torch.fft.fft(x), "histc": lambda x: torch.histc(x, 4), "bincount": lambda x: torch.bincount(x.view(-1)),
        "round": lambda x: x.round(), "floor": lambda x: x.floor(), "add_scalar": lambda x: x + 1, "mul_true": lambda x: x * True,
        "add_cpu0d_f": lambda x: x + torch.tensor(1.5), "add_cpu0d_i": lambda x: x + torch.tensor(2), "eq_scalar": lambda x: x == 2,
        "index_put": lambda x: x.clone().index_put_((idx(0, 1),), x[0, 0].clone()), "copy_from_f": lambda x: x.clone().copy_(torch.ones(2, 3, device=dev)),
        "equal": lambda x: torch.equal(x, x), "flatten_view": lambda x: x.view(-1), "view_as_real": lambda x: torch.view_as_real(x),
        "tril": lambda x: x.tril(), "repeat": lambda x: x.repeat(2, 1), "pad": lambda x: F.pad(x, (1, 1)),
        "item": lambda x: x[0, 0].item(), "tolist": lambda x: x.tolist(), "isclose": lambda x: torch.isclose(x, x),
        "min_dim": lambda x: x.min(1), "cummax": lambda x: x.cummax(1), "var_mean": lambda x: torch.var_mean(x),
        "dot": lambda x: torch.dot(x[0], x[0]), "bmm": lambda x: torch.bmm(x[None], x.T[None]), "conj": lambda x: x.conj_physical(),
        "square": lambda x: x.square(), "reciprocal": lambda x: x.reciprocal(), "rsqrt": lambda x: x.rsqrt(),
    }


def dtype_cases():
    out = {}
    for dt in DTYPES:
        n = str(dt).split(".")[1]
        for name, fn in dtype_ops().items():
            def run(fn=fn, dt=dt):
                x = torch.tensor([[1., 2, 3], [4, 5, 2]]).to(dt).to(dev)
                return fn(x)
            out[f"{name}:{n}"] = run
    return out


def tf32_facts():
    """Max abs differences of GPU fp32 matmuls / convs from float64 references of the inputs as they are, rounded
    to TF32 (nearest, ties to even) and truncated to TF32."""
    def rn(t):
        i = t.view(torch.int32)
        r = (i + 0xFFF + ((i >> 13) & 1)) & ~0x1FFF
        return r.view(torch.float32)

    def rz(t):
        return (t.view(torch.int32) & ~0x1FFF).view(torch.float32)

    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(64, 512, generator=g), torch.randn(512, 48, generator=g)
    x, w = torch.randn(2, 8, 12, 12, generator=g), torch.randn(6, 8, 3, 3, generator=g)
    refs = {k: (f(a).double() @ f(b).double(), F.conv2d(f(x).double(), f(w).double()))
            for k, f in (("exact", lambda t: t), ("rn", rn), ("rz", rz))}
    res = {}

    def cmp(name, mm, conv):
        res[name] = {f"{which}_{k}": float((got.double().cpu() - refs[k][i]).abs().max())
                     for k in refs for i, (which, got) in enumerate((("mm", mm), ("conv", conv))) if got is not None}

    A, B, X, W = a.to(dev), b.to(dev), x.to(dev), w.to(dev)
    settings = [
        ("default", lambda: None),
        ("allow_tf32", lambda: setattr(torch.backends.cuda.matmul, "allow_tf32", True)),
        ("prec_high", lambda: torch.set_float32_matmul_precision("high")),
        ("prec_medium", lambda: torch.set_float32_matmul_precision("medium")),
        ("cudnn_tf32_off", lambda: setattr(torch.backends.cudnn, "allow_tf32", False)),
    ]
    for name, set_ in settings:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
        torch.backends.cudnn.allow_tf32 = True
        set_()
        try:
            cmp(name, A @ B, F.conv2d(X, W))
            res[name]["linear_rn"] = float((F.linear(A, B.T).double().cpu() - refs["rn"][0]).abs().max())
            res[name]["bmm_rn"] = float((torch.bmm(A[None], B[None])[0].double().cpu() - refs["rn"][0]).abs().max())
            res[name]["flags"] = [torch.backends.cuda.matmul.allow_tf32, torch.get_float32_matmul_precision(),
                                  torch.backends.cudnn.allow_tf32]
        except Exception as e:  # noqa: BLE001
            res[name] = f"{type(e).__name__}: {str(e)[:90]}"
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    torch.backends.cudnn.allow_tf32 = True
    # reduced-precision reductions of half / bf16 gemms: a long K, against the float32-accumulated product
    a16 = (torch.rand(16, 8192, generator=g) * 2).half()
    b16 = (torch.rand(8192, 16, generator=g) * 2).half()
    ref = (a16.double() @ b16.double())
    cpu16 = (a16 @ b16).double()
    for flag in (True, False):
        torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = flag
        torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = flag
        got = (a16.to(dev) @ b16.to(dev)).double().cpu()
        gotb = (a16.bfloat16().to(dev) @ b16.bfloat16().to(dev)).double().cpu()
        refb = a16.bfloat16().double() @ b16.bfloat16().double()
        res[f"fp16_reduced_{flag}"] = {"vs_exact": float((got - ref).abs().max()), "vs_cpu": float((got - cpu16).abs().max()),
                                       "bf16_vs_exact": float((gotb - refb).abs().max()),
                                       "bf16_vs_cpu": float((gotb - (a16.bfloat16() @ b16.bfloat16()).double()).abs().max())}
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = True
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = True
    return res


def autocast_cases():
    def ac(fn, **kw):
        def run():
            with torch.autocast("cuda", **kw):
                r = fn()
            return [x.dtype if isinstance(x, torch.Tensor) else x for x in (r if isinstance(r, tuple) else (r,))]
        return run
    a, b = base(shape=(4, 4)), base(shape=(4, 4)) * 0.1
    ah = a.half()
    img = base(shape=(1, 2, 4, 4))
    ops = {
        "mm": lambda: a @ b, "addmm": lambda: torch.addmm(a, a, b), "linear": lambda: F.linear(a, b, a[0]),
        "bmm": lambda: torch.bmm(a[None], b[None]), "conv2d": lambda: F.conv2d(img, torch.ones(1, 2, 3, 3, device=dev)),
        "matmul_h_f": lambda: ah @ b, "softmax": lambda: a.softmax(-1), "softmax_h": lambda: ah.softmax(-1),
        "log_softmax_h": lambda: ah.log_softmax(-1), "exp_h": lambda: ah.exp(), "sum_h": lambda: ah.sum(),
        "mean_h": lambda: ah.mean(), "cumsum_h": lambda: ah.cumsum(0), "prod_h": lambda: ah.prod(),
        "layer_norm_h": lambda: F.layer_norm(ah, (4,)), "group_norm_h": lambda: F.group_norm(ah[None], 2),
        "mse_h": lambda: F.mse_loss(ah, ah), "ce_h": lambda: F.cross_entropy(ah, idx(0, 1, 2, 3)),
        "nll_h": lambda: F.nll_loss(ah, idx(0, 1, 2, 3)), "bce_h": lambda: F.binary_cross_entropy(ah.sigmoid(), ah.sigmoid()),
        "bce_logits_h": lambda: F.binary_cross_entropy_with_logits(ah, ah.sigmoid()), "cat_mixed": lambda: torch.cat([ah, a]),
        "stack_mixed": lambda: torch.stack([ah, a]), "add_mixed": lambda: ah + a, "addcmul_mixed": lambda: torch.addcmul(a, ah, a),
        "dot_mixed": lambda: torch.dot(ah[0], a[0]), "einsum": lambda: torch.einsum("ij,jk->ik", a, b),
        "norm_h": lambda: ah.norm(), "pow_h": lambda: ah.pow(2), "rsqrt_h": lambda: ah.rsqrt(), "acos_h": lambda: (ah * 0).acos(),
        "cdist": lambda: torch.cdist(a, b), "gelu_h": lambda: F.gelu(ah), "erfinv_h": lambda: (ah * 0).erfinv(),
        "sdpa": lambda: F.scaled_dot_product_attention(a[None, None], a[None, None], a[None, None]),
        "cosine_sim_h": lambda: F.cosine_similarity(ah, ah), "index_put_mixed": lambda: a.clone().index_put_((idx(0),), ah[0]),
        "where_mixed": lambda: torch.where(a > 2, ah, a), "lerp_h": lambda: torch.lerp(ah, ah, 0.5),
        "topk_h": lambda: ah.topk(2)[0], "baddbmm": lambda: torch.baddbmm(a[None], a[None], b[None]),
        "mv": lambda: torch.mv(a, a[0]), "addmv": lambda: torch.addmv(a[0], a, a[0]), "prelu": lambda: F.prelu(a, torch.ones(1, device=dev)),
        "matmul_f64": lambda: a.double() @ b.double(), "mm_int": lambda: a.long() @ b.long(),
        "lstm_cell": lambda: torch.lstm_cell(a, (a, a), torch.ones(16, 4, device=dev), torch.ones(16, 4, device=dev))[0],
        "batch_norm_h": lambda: F.batch_norm(ah, None, None, training=True), "sigmoid_h": lambda: ah.sigmoid(),
        "kl_div_h": lambda: F.kl_div(ah, ah), "smooth_l1_h": lambda: F.smooth_l1_loss(ah, ah),
        "embedding_h": lambda: F.embedding(idx(0, 1), ah), "renorm_h": lambda: ah.renorm(2, 0, 1.0),
        "sum_f64": lambda: a.double().sum(), "polar": lambda: torch.polar(a, a),
    }
    out = {}
    for k, fn in ops.items():
        out[f"ac16:{k}"] = ac(fn)
        out[f"acbf16:{k}"] = ac(fn, dtype=torch.bfloat16)
    out["ac_f32_dtype"] = ac(lambda: a @ b, dtype=torch.float32)
    out["ac_disabled_inner"] = lambda: _nested(lambda: torch.autocast("cuda", enabled=False))
    out["ac_cpu_inner"] = lambda: _nested(lambda: torch.autocast("cpu"))
    out["ac_cuda_amp_alias"] = lambda: _amp_alias()
    out["ac_cpu_only"] = lambda: _cpu_only()
    out["ac_cache"] = lambda: _cache()
    out["ac_grad_dtypes"] = lambda: _grad_dtypes()
    out["ac_custom_fwd"] = lambda: _custom_fwd()
    return out


def _nested(inner):
    a = base(shape=(4, 4))
    with torch.autocast("cuda"):
        x = a @ a
        with inner():
            y = a @ a
            yc = a.cpu() @ a.cpu()
        z = a @ a
    return [x.dtype, y.dtype, yc.dtype, z.dtype]


def _amp_alias():
    a = base(shape=(4, 4))
    with torch.cuda.amp.autocast():
        x = a @ a
    with torch.amp.autocast(device_type="cuda", dtype=torch.bfloat16):
        y = a @ a
    return [x.dtype, y.dtype, torch.is_autocast_enabled()]


def _cpu_only():
    a = base(shape=(4, 4))
    with torch.autocast("cpu"):
        x = a @ a
        y = a.cpu() @ a.cpu()
    return [x.dtype, y.dtype]


def _cache():
    w = torch.nn.Parameter(base(shape=(4, 4)))
    with torch.autocast("cuda"):
        y1 = w @ w
        y2 = w @ w
    return [y1.dtype, torch.equal(y1, y2)]


def _grad_dtypes():
    w = torch.nn.Parameter(base(shape=(4, 4)) * 0.1)
    with torch.autocast("cuda"):
        y = (w @ w).float().sum()
    y.backward()
    return [w.grad.dtype, h(w.grad)]


def _custom_fwd():
    class Fn(torch.autograd.Function):
        @staticmethod
        @torch.amp.custom_fwd(device_type="cuda", cast_inputs=torch.float32)
        def forward(ctx, x):
            return x @ x

        @staticmethod
        @torch.amp.custom_bwd(device_type="cuda")
        def backward(ctx, g):
            return g
    a = base(shape=(4, 4)).half()
    with torch.autocast("cuda"):
        return [Fn.apply(a).dtype]


def grad_scaler_facts():
    g = torch.Generator().manual_seed(0)
    m = torch.nn.Linear(4, 4).to(dev)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    sc = torch.amp.GradScaler("cuda", init_scale=2.0 ** 10, growth_interval=2)
    seen = []
    for step in range(5):
        x = torch.randn(3, 4, generator=g).to(dev)
        with torch.autocast("cuda"):
            y = m(x).float().pow(2).sum() * (1e30 if step == 2 else 1)
        opt.zero_grad()
        sc.scale(y).backward()
        sc.step(opt)
        sc.update()
        seen.append(sc.get_scale())
    return [seen, h(m.weight), h(m.bias)]


def promotion_cases():
    c = lambda dt: torch.tensor([1, 2], dtype=dt, device=dev)  # noqa: E731
    return {
        "i64+cpu0d_f64": lambda: (c(torch.int64) + torch.tensor(1.5, dtype=torch.float64)).dtype,
        "f16+cpu0d_f64": lambda: (c(torch.float16) + torch.tensor(1.5, dtype=torch.float64)).dtype,
        "i8+cpu0d_i64": lambda: (c(torch.int8) + torch.tensor(300)).dtype,
        "bool+cpu0d_i64": lambda: (c(torch.bool) + torch.tensor(3)).dtype,
        "u8+py_neg": lambda: h(c(torch.uint8) + (-1)),
        "f16+cpu1d": lambda: (c(torch.float16) + torch.tensor([1.0])).dtype,
        "where_cpu0d": lambda: h(torch.where(c(torch.bool), c(torch.float32), torch.tensor(7.0))),
        "cpu0d+cuda_i32": lambda: (torch.tensor(1.5) + c(torch.int32)).dtype,
        "mul_cpu0d_c64": lambda: (c(torch.float32) * torch.tensor(1j)).dtype,
        "f16+cpu0d_f64_value": lambda: h(c(torch.float16) * torch.tensor(1e5, dtype=torch.float64)),
        "i32_div_cpu0d_i": lambda: h(c(torch.int32) / torch.tensor(3)),
        "bf16+py_float": lambda: h(c(torch.bfloat16) + 1e-3),
        "inplace_i32+=cpu0d_f": lambda: c(torch.int32).add_(torch.tensor(1.5)),
        "inplace_f16+=cpu0d_f64": lambda: h(c(torch.float16).add_(torch.tensor(1e-4, dtype=torch.float64))),
        "sum_u8": lambda: h(torch.full((300,), 255, dtype=torch.uint8, device=dev).sum()),
        "sum_i8_dtype": lambda: (c(torch.int8).sum()).dtype,
        "prod_bool": lambda: h(c(torch.bool).prod()),
        "cumsum_bool": lambda: h(c(torch.bool).cumsum(0)),
        "mean_h_big": lambda: h(torch.full((4096,), 60000.0, dtype=torch.float16, device=dev).mean()),
        "sum_h_big": lambda: h(torch.full((4096,), 16.0, dtype=torch.float16, device=dev).sum()),
        "cumsum_h_long": lambda: h(torch.full((5000,), 1.0, dtype=torch.float16, device=dev).cumsum(0)),
        "cumsum_bf16_long": lambda: h(torch.full((5000,), 1.0, dtype=torch.bfloat16, device=dev).cumsum(0)),
        "sum_bf16_long": lambda: h(torch.full((5000,), 1.0, dtype=torch.bfloat16, device=dev).sum()),
        "var_h": lambda: h(torch.arange(2048, dtype=torch.float16, device=dev).var()),
        "norm_h_big": lambda: h(torch.full((64,), 1e4, dtype=torch.float16, device=dev).norm()),
        "softmax_h": lambda: h(torch.arange(8, dtype=torch.float16, device=dev).softmax(0)),
        "logsumexp_h": lambda: h(torch.full((8,), 20.0, dtype=torch.float16, device=dev).logsumexp(0)),
        "prod_i8": lambda: h(torch.full((8,), 3, dtype=torch.int8, device=dev).prod()),
        "cumprod_i8": lambda: h(torch.full((8,), 3, dtype=torch.int8, device=dev).cumprod(0)),
        "mean_i_error": lambda: c(torch.int64).mean(),
        "sum_f16_dtype_f32": lambda: h(torch.full((4096,), 16.0, dtype=torch.float16, device=dev).sum(dtype=torch.float32)),
        "addmm_f16_beta": lambda: h(torch.addmm(torch.full((2, 2), 1e4, dtype=torch.float16, device=dev), torch.full((2, 3), 100.0, dtype=torch.float16, device=dev), torch.full((3, 2), 100.0, dtype=torch.float16, device=dev))),
    }


def run_section(name, cases):
    return {k: outcome(fn) for k, fn in cases.items()}


def main():
    res = {"torch": torch.__version__, "cuda": torch.version.cuda}
    if SECTION == "cublas":
        torch.use_deterministic_algorithms(True)
        cases = {k: v for k, v in det_cases().items() if k.startswith(("mm", "bmm", "addmm", "linear", "mv", "dot",
                                                                         "matmul", "einsum", "baddbmm", "conv"))}
        res["cublas_raise"] = run_section("cublas", cases)
        torch.use_deterministic_algorithms(True, warn_only=True)
        res["cublas_warn"] = run_section("cublas", cases)
        torch.use_deterministic_algorithms(False)
        return res
    os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
    torch.use_deterministic_algorithms(True)
    res["det_raise"] = run_section("det", det_cases())
    res["fill"] = run_section("fill", fill_cases())
    torch.utils.deterministic.fill_uninitialized_memory = False
    res["fill_off"] = {k: v for k, v in run_section("fill", fill_cases()).items() if k in ("empty_int32", "resize_grow")}
    torch.utils.deterministic.fill_uninitialized_memory = True
    torch.use_deterministic_algorithms(True, warn_only=True)
    res["det_warn"] = run_section("det", det_cases())
    torch.use_deterministic_algorithms(False)
    res["det_off"] = run_section("det", det_cases())
    res["dtype"] = run_section("dtype", dtype_cases())
    res["tf32"] = tf32_facts()
    res["autocast"] = run_section("autocast", autocast_cases())
    res["grad_scaler"] = outcome(grad_scaler_facts)
    res["promotion"] = run_section("promotion", promotion_cases())
    return res


if __name__ == "__main__" or os.environ.get("D_SECTION_UNDER_SIM"):
    out = main()
    if SECTION == "all" and not os.environ.get("D_NO_CHILD"):
        env = {k: v for k, v in os.environ.items() if k != "CUBLAS_WORKSPACE_CONFIG"}
        env["D_SECTION"] = "cublas"
        env["FACTS_OUT"] = "/tmp/d_cublas.json"
        cmd = [sys.executable, __file__] if not os.environ.get("D_CHILD_CMD") else os.environ["D_CHILD_CMD"].split()
        p = subprocess.run(cmd, env=env, capture_output=True, text=True)
        try:
            out.update({k: v for k, v in json.load(open("/tmp/d_cublas.json")).items() if k.startswith("cublas")})
        except Exception as e:  # noqa: BLE001
            out["cublas"] = f"child failed: {p.returncode} {p.stderr[-300:]}"
    text = json.dumps(out, indent=0, default=str)
    if os.environ.get("FACTS_OUT"):
        open(os.environ["FACTS_OUT"], "w").write(text)
    print(len(text), "bytes;", sum(len(v) for v in out.values() if isinstance(v, dict)), "facts")
