"""Op rules for the CUDA-only kernels of torch.nn.SyncBatchNorm (torch/nn/modules/_functions.py), which have no CPU
kernel for simdist to run ("Could not run 'aten::batch_norm_stats' with arguments from the 'CPU' backend"): each
is computed from ordinary aten ops on the simulated tensors, on the current stream, as the CUDA kernels define it
(aten/src/ATen/native/cuda/Normalization.cuh and Normalization.cu):

- batch_norm_stats(input, eps) -> (mean, invstd): per channel (dim 1) over every other dim; invstd =
  1 / sqrt(biased var + eps); in float32 for a float16 / bfloat16 input (the accumulate type).
- batch_norm_gather_stats_with_counts(input, mean, invstd, running_mean, running_var, momentum, eps, counts) ->
  (mean, invstd): the ranks' (mean, invstd, count) rows merged (Welford: global mean, biased variance over all
  counts; rows of count 0 add nothing); running stats updated in place with the unbiased variance
  (var * n / (n - 1)), as batch_norm_reduce_statistics_kernel does. batch_norm_gather_stats takes one count for
  every row.
- batch_norm_elemt(input, weight, bias, mean, invstd, eps) = (input - mean) * invstd * weight + bias.
- batch_norm_backward_reduce(grad_out, input, mean, invstd, weight, input_g, weight_g, bias_g) -> (sum_dy,
  sum_dy_xmu, grad_weight, grad_bias): per-channel sums of dy and dy * (x - mean); grad_weight = sum_dy_xmu *
  invstd, grad_bias = sum_dy; the outputs not asked for are undefined (None), as the CUDA kernel leaves them.
- batch_norm_backward_elemt(grad_out, input, mean, invstd, weight, sum_dy, sum_dy_xmu, count) = (dy - sum_dy / n -
  (x - mean) * invstd^2 * sum_dy_xmu / n) * invstd * weight, n the sum of the counts.
The summation order is the CPU ops', not CUDA's block reduction: values agree to rounding, not bit for bit.
"""
from __future__ import annotations

import torch

from ..op_rules import register

aten = torch.ops.aten
_REDUCED = (torch.bfloat16, torch.float16)


def _acc(x):
    return x.float() if x.dtype in _REDUCED else x


def _dims(x):
    return [d for d in range(x.dim()) if d != 1]


def _bc(v, x):
    """A per-channel vector shaped to broadcast over x (channels on dim 1)."""
    return v.reshape([1, -1] + [1] * (x.dim() - 2))


@register(aten.batch_norm_stats.default)
def _stats(me, func, args, kwargs):
    x, eps = (list(args) + [kwargs.get("eps")])[:2]
    xa = _acc(x)
    dims = _dims(x)
    mean = xa.mean(dim=dims)
    var = (xa - _bc(mean, xa)).square().mean(dim=dims)
    return mean, (var + eps).rsqrt()


def _gather(inp, mean, invstd, running_mean, running_var, momentum, eps, counts):
    counts = counts.to(mean.dtype).reshape(-1, 1)
    n = counts.sum()
    gmean = (mean * counts).sum(dim=0) / n
    var_i = invstd.square().reciprocal() - eps
    var = ((var_i + (mean - gmean).square()) * counts).sum(dim=0) / n
    with torch.no_grad():
        if running_mean is not None:
            running_mean.mul_(1 - momentum).add_(gmean.to(running_mean.dtype), alpha=momentum)
        if running_var is not None:
            unbiased = var * n / (n - 1)
            running_var.mul_(1 - momentum).add_(unbiased.to(running_var.dtype), alpha=momentum)
    return gmean, (var + eps).rsqrt()


@register(aten.batch_norm_gather_stats_with_counts.default)
def _gather_with_counts(me, func, args, kwargs):
    names = ("input", "mean", "invstd", "running_mean", "running_var", "momentum", "eps", "counts")
    a = list(args) + [kwargs[k] for k in names[len(args):]]
    return _gather(*a)


@register(aten.batch_norm_gather_stats.default)
def _gather_one_count(me, func, args, kwargs):
    names = ("input", "mean", "invstd", "running_mean", "running_var", "momentum", "eps", "count")
    a = list(args) + [kwargs[k] for k in names[len(args):]]
    counts = torch.full((a[1].shape[0],), float(a[7]), dtype=a[1].dtype, device=a[1].device)
    return _gather(*a[:7], counts)


@register(aten.batch_norm_elemt.default)
def _elemt(me, func, args, kwargs):
    names = ("input", "weight", "bias", "mean", "invstd", "eps")
    x, w, b, mean, invstd, _eps = list(args) + [kwargs.get(k) for k in names[len(args):]]
    y = (_acc(x) - _bc(mean, x)) * _bc(invstd, x)
    if w is not None:
        y = y * _bc(w, x)
    if b is not None:
        y = y + _bc(b, x)
    return y.to(x.dtype)


@register(aten.batch_norm_backward_reduce.default)
def _backward_reduce(me, func, args, kwargs):
    names = ("grad_out", "input", "mean", "invstd", "weight", "input_g", "weight_g", "bias_g")
    dy, x, mean, invstd, w, input_g, weight_g, bias_g = list(args) + [kwargs[k] for k in names[len(args):]]
    dims = _dims(x)
    dya = _acc(dy)
    sum_dy = dya.sum(dim=dims)
    sum_dy_xmu = (dya * (_acc(x) - _bc(mean, x))).sum(dim=dims)
    grad_weight = (sum_dy_xmu * invstd).to(w.dtype) if weight_g and w is not None else None
    grad_bias = sum_dy.to(w.dtype) if bias_g and w is not None else None
    if not input_g:
        sum_dy = sum_dy_xmu = None
    return sum_dy, sum_dy_xmu, grad_weight, grad_bias


@register(aten.batch_norm_backward_elemt.default)
def _backward_elemt(me, func, args, kwargs):
    names = ("grad_out", "input", "mean", "invstd", "weight", "sum_dy", "sum_dy_xmu", "count")
    dy, x, mean, invstd, w, sum_dy, sum_dy_xmu, count = list(args) + [kwargs[k] for k in names[len(args):]]
    n = count.to(torch.float32).sum()
    mean_dy = sum_dy / n
    mean_dy_xmu = sum_dy_xmu / n
    inv = _bc(invstd, x)
    g = (_acc(dy) - _bc(mean_dy, x) - (_acc(x) - _bc(mean, x)) * inv * inv * _bc(mean_dy_xmu, x)) * inv
    if w is not None:
        g = g * _bc(w, x)
    return g.to(x.dtype)
