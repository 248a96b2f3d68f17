"""torch.use_deterministic_algorithms(True) on simulated CUDA: the CUDA kernels that alert, and the memory that
deterministic mode fills.

Rule 1, alerts (aten/src/ATen/Context.cpp `Context::alertNotDeterministic(caller)`; the callers are CUDA kernels'
host code, e.g. cuda/SummaryOps.cu `_histc_cuda`, cuda/Indexing.cu `index_reduce_func_cuda_impl`, cuda/
NLLLoss2d.cu, cuda/EmbeddingBag.cu; torch/__init__.py use_deterministic_algorithms lists them): with
deterministic algorithms on, such an op raises RuntimeError "<caller> does not have a deterministic
implementation, but you set 'torch.use_deterministic_algorithms(True)'. ..." at the call, before any kernel; with
warn_only=True it warns (a UserWarning, TORCH_WARN) and runs. The CPU kernels simdist runs have no such alert (or
another one), so simdist computed where a GPU raises. The table below is what an H200 (torch 2.11, CUDA 13) does
for each op, measured by ci/gpu_d_facts.py (docs/gpu/d-series-facts-2026-12-02.json): the alerting ops with their
conditions and caller names, and not the ops that have a deterministic CUDA path in this mode (index_add_,
scatter_add_, scatter_reduce sum/mean, index_put_ accumulate, cumsum, nll_loss of 2-D input, bilinear interpolate
and reflection_pad2d backward...). Ops whose CPU kernels alert too (put_ without accumulate, max_unpool) are
listed as well, so that the alert comes at the call as on a GPU, not when the CPU kernel runs. The cuBLAS
workspace check (alertCuBLASConfigNotDeterministic) raised nothing on that GPU without CUBLAS_WORKSPACE_CONFIG,
for mm / bmm / addmm / linear / mv / dot / einsum / baddbmm in float32, float16, bfloat16, float64: not modelled,
as it does not fire.

Rule 2, the memory deterministic mode fills: simdist/faces/deterministic_fill.py.
"""
from __future__ import annotations

import warnings

import torch

from ..op_rules import register_call_check

aten = torch.ops.aten


def _message(caller, warn_only):
    if warn_only:
        return (f"{caller} does not have a deterministic implementation, but you set "
                "'torch.use_deterministic_algorithms(True, warn_only=True)'. You can file an issue at "
                "https://github.com/pytorch/pytorch/issues to help us prioritize adding deterministic support for "
                "this operation.")
    return (f"{caller} does not have a deterministic implementation, but you set "
            "'torch.use_deterministic_algorithms(True)'. You can turn off determinism just for this operation, or "
            "you can use the 'warn_only=True' option, if that's acceptable for your application. You can also "
            "file an issue at https://github.com/pytorch/pytorch/issues to help us prioritize adding deterministic "
            "support for this operation.")


def alert(caller):
    """Context::alertNotDeterministic as a CUDA kernel's host code calls it."""
    if not torch.are_deterministic_algorithms_enabled():
        return
    if torch.is_deterministic_algorithms_warn_only_enabled():
        warnings.warn(_message(caller, True), UserWarning, stacklevel=4)
        return
    raise RuntimeError(_message(caller, False))


def _arg(func, args, kwargs, name, default=None):
    for i, a in enumerate(func._schema.arguments):
        if a.name == name:
            if i < len(args):
                return args[i]
            return kwargs.get(name, a.default_value if a.has_default_value() else default)
    return default


def _when(caller, pred=None):
    def check(func, args, kwargs):
        if pred is None or pred(func, args, kwargs):
            alert(caller)
    return check


def _is_float(t):
    return t.is_floating_point() or t.is_complex()


# op -> check(func, args, kwargs), each measured on the H200 (case names of ci/gpu_d_facts.py det_cases in ())
_ALERTS = {
    # (scatter_reduce_prod; sum / mean / amax: no alert)
    (aten.scatter_reduce.two, aten.scatter_reduce_.two):
        _when("scatter_reduce_cuda_prod_", lambda f, a, k: _arg(f, a, k, "reduce") == "prod"),
    # (index_reduce_prod) cuda/Indexing.cu index_reduce_func_cuda_impl alerts for every reduction
    (aten.index_reduce.default, aten.index_reduce_.default): _when("index_reduce_cuda"),
    # (put_acc, put_noacc) TensorAdvancedIndexing.cpp put_: `!accumulate || self is CUDA`
    (aten.put_.default, aten.put.default): _when("put_"),
    # (histc_f; histc_i: no alert) cuda/SummaryOps.cu
    (aten.histc.default,): _when("_histc_cuda with floating point input", lambda f, a, k: _is_float(a[0])),
    # (bincount_w; bincount: no alert)
    (aten.bincount.default,): _when("_bincount_cuda", lambda f, a, k: _arg(f, a, k, "weights") is not None),
    # (median_dim, nanmedian_dim; median_all, nanmedian_all, kthvalue, mode: no alert)
    (aten.median.dim, aten.nanmedian.dim): _when("median CUDA with indices output"),
    # (nll2d_mean; nll2d_none and nll_loss of 2-D input: no alert)
    (aten.nll_loss2d_forward.default,):
        _when("nll_loss2d_forward_out_cuda_template", lambda f, a, k: _arg(f, a, k, "reduction") != 0),
    # (emb_bag_max_bw; sum / mean: no alert) EmbeddingBag.cu embedding_bag_backward_cuda_max, from the dense
    # backward (_embedding_bag_backward reaches simdist whole, or its dense part directly)
    (aten._embedding_bag_dense_backward.default,):
        _when("embedding_bag_backward_cuda_max", lambda f, a, k: _arg(f, a, k, "mode") == 2),
    (aten._embedding_bag_backward.default,):
        _when("embedding_bag_backward_cuda_max", lambda f, a, k: _arg(f, a, k, "mode") == 2 and not _arg(f, a, k, "sparse")),
    (aten.avg_pool3d_backward.default,): _when("avg_pool3d_backward_cuda"),
    (aten._adaptive_avg_pool2d_backward.default,): _when("adaptive_avg_pool2d_backward_cuda"),
    (aten._adaptive_avg_pool3d_backward.default,): _when("adaptive_avg_pool3d_backward_cuda"),
    # (adaptive_max2d_bw, adaptive_max1d_bw: 1-d goes through 2-d)
    (aten.adaptive_max_pool2d_backward.default,): _when("adaptive_max_pool2d_backward_cuda"),
    (aten.max_pool3d_with_indices_backward.default,): _when("max_pool3d_with_indices_backward_cuda"),
    # (max_unpool2d, max_unpool1d: the CPU kernel alerts too, when it runs)
    (aten.max_unpool2d.default,): _when("max_unpooling2d_forward_out"),
    # (interp_linear_bw, interp_bicubic_bw; bilinear, nearest: no alert)
    (aten.upsample_linear1d_backward.default,): _when("upsample_linear1d_backward_out_cuda"),
    (aten.upsample_bicubic2d_backward.default,): _when("upsample_bicubic2d_backward_out_cuda"),
    # (reflect_pad1d_bw; reflection_pad2d, replication pads: no alert)
    (aten.reflection_pad1d_backward.default,): _when("reflection_pad1d_backward_out_cuda"),
    (aten.grid_sampler_2d_backward.default,): _when("grid_sampler_2d_backward_cuda"),
    # (ctc_bw)
    (aten._ctc_loss_backward.default, aten._ctc_loss_backward.Tensor): _when("ctc_loss_backward_gpu"),
}

register_call_check(*[op for ops in _ALERTS for op in ops])(
    lambda func, args, kwargs: _CHECKS[func](func, args, kwargs))
_CHECKS = {op: chk for ops, chk in _ALERTS.items() for op in ops}
