"""cumsum / cumprod of float16 and bfloat16 computed as CUDA's scan kernels compute them (notes d18).

The CPU kernel (ReduceOpsKernel.cpp cumsum_cpu_kernel / cumprod_cpu_kernel) accumulates in float
(at::acc_type) and rounds each output once. CUDA's (cuda/CumsumKernel.cu, CumprodKernel.cu) scan with
`std::plus<scalar_t>` / `std::multiplies<scalar_t>`: every partial result is a Half / BFloat16 (computed in float,
rounded back), and the association is the kernel's (cuda/ScanUtils.cuh scan_dim):

- a tensor whose only non-trivial dimension is the scanned one: CUB's DeviceScan::InclusiveScan (cuda/cub.cuh).
  c10::Half is not a CUB primitive type, so the scan takes CUB's default policy, 128 threads of 30 items (15
  nominal 4-byte items scaled to 2-byte ones): per thread a sequential fold, Kogge-Stone warp scans of the
  thread totals, the warps' totals folded in order, then each thread's items scanned sequentially from its
  exclusive prefix; a tile's prefix is the previous tile's inclusive prefix (the decoupled look-back when every
  earlier tile has finished; a GPU may fold partial aggregates instead, timing-dependent, for 3+ tiles);
- the innermost dimension otherwise: tensor_kernel_scan_innermost_dim, blocks of 2 * num_threads_x elements
  scanned in shared memory with Sklansky's method, the running block total added to each block's first element;
- an outer dimension: tensor_kernel_scan_outer_dim, one thread per inner row, a sequential scan.

Measured on an H200 (ci/gpu_d_facts.py promotion section, docs/gpu/d-series-facts-2026-12-02.json):
`torch.full((5000,), 1.0, dtype=float16).cumsum(0)` and the bfloat16 one have the hashes this computes; CPU's
differ (exact integers up to 2048 / 256 and round-once after, where the GPU's partial sums saturate per tile).
float32 / float64 keep the CPU kernel (it accumulates in double; a GPU in the type, with CUB's tuned tiles for
primitive types, unmeasured: they can differ in the last bits). logcumsumexp is not modelled.
"""
from __future__ import annotations

import torch

from ..dispatch import _functional, _inplace, _sim_of
from ..op_info import op_info
from ..op_rules import register

aten = torch.ops.aten
_LOW = (torch.float16, torch.bfloat16)
_CUB_THREADS, _CUB_ITEMS, _WARP = 128, 30, 32


def _ops(kind, dt):
    # the kernel's binary op: float arithmetic of two scalar_t values, rounded back to scalar_t
    if kind == "sum":
        return lambda a, b: (a.float() + b.float()).to(dt)
    return lambda a, b: (a.float() * b.float()).to(dt)


def _seeded(seed, has, vals, op):
    # op(seed, v) where there is a seed (`has`), else v; seed None: no seed anywhere
    if seed is None:
        return vals, has
    return torch.where(has, op(seed, vals), seed.expand_as(vals)), torch.ones_like(has)


def _cub_scan(x, op):
    """CUB's inclusive scan of the 1-d tensor x (in its dtype), tile by tile."""
    n, tile = x.numel(), _CUB_THREADS * _CUB_ITEMS
    out = torch.empty_like(x)
    prefix = None  # the previous tiles' inclusive prefix
    for t0 in range(0, n, tile):
        seg = x[t0:t0 + tile]
        m = seg.numel()
        threads = -(-m // _CUB_ITEMS)
        items = torch.cat([seg, seg.new_zeros(threads * _CUB_ITEMS - m)]).view(threads, _CUB_ITEMS)
        valid = (torch.arange(threads * _CUB_ITEMS) < m).view(threads, _CUB_ITEMS)
        total = items[:, 0]
        for j in range(1, _CUB_ITEMS):  # a thread's partial: a sequential fold of its items
            total = torch.where(valid[:, j], op(total, items[:, j]), total)
        warps = -(-threads // _WARP)
        inc = torch.cat([total, total.new_zeros(warps * _WARP - threads)]).view(warps, _WARP)
        d = 1
        while d < _WARP:  # Kogge-Stone warp scan: lane l takes op(lane l-d, lane l); padding lanes come last
            inc = torch.cat([inc[:, :d], op(inc[:, :-d], inc[:, d:])], dim=1)
            d *= 2
        last = [min(_WARP, threads - w * _WARP) - 1 for w in range(warps)]
        # a lane's exclusive prefix within its warp, then the earlier warps' totals folded in order before it
        excl = torch.cat([inc.new_zeros(warps, 1), inc[:, :-1]], dim=1)
        has = torch.arange(_WARP).expand(warps, _WARP) > 0
        warp_prefix = None
        rows_e, rows_h = [], []
        for w in range(warps):
            e, hw = _seeded(warp_prefix, has[w], excl[w], op)
            rows_e.append(e)
            rows_h.append(hw)
            agg = inc[w, last[w]]
            warp_prefix = agg if warp_prefix is None else op(warp_prefix, agg)
        e, hw = torch.stack(rows_e).reshape(-1)[:threads], torch.stack(rows_h).reshape(-1)[:threads]
        e, hw = _seeded(prefix, hw, e, op)  # the tile's prefix from the look-back comes first
        res = torch.empty_like(items)
        run = torch.where(hw, op(e, items[:, 0]), items[:, 0])
        res[:, 0] = run
        for j in range(1, _CUB_ITEMS):  # each thread's items, scanned from its exclusive prefix
            run = op(run, items[:, j])
            res[:, j] = run
        out[t0:t0 + m] = res.reshape(-1)[:m]
        prefix = warp_prefix if prefix is None else op(prefix, warp_prefix)
    return out


def _innermost_scan(x2, op):
    """tensor_kernel_scan_innermost_dim over the rows of the 2-d tensor x2."""
    rows, size = x2.shape
    lx, ly = (size - 1).bit_length(), (rows - 1).bit_length()  # ceil(log2) of the row size and row count
    # get_log_num_threads_x_inner_scan<uint32_t>: (9 + lx - ly) / 2 in unsigned arithmetic, clamped to [4, 9]
    log_x = min(max(4, ((9 + lx - ly) % 2 ** 32) // 2), 9)
    nx = 1 << log_x
    out = torch.empty_like(x2)
    total = None
    for c0 in range(0, size, 2 * nx):
        buf = x2.new_zeros(rows, 2 * nx)  # init 0 / 1 fills the block's tail; only written-back columns matter
        part = x2[:, c0:c0 + 2 * nx]
        buf[:, :part.shape[1]] = part
        if total is not None:
            buf[:, 0] = op(buf[:, 0], total)
        t = torch.arange(nx)
        for m in range(log_x + 1):  # Sklansky: a step's threads write disjoint elements from ones it leaves alone
            a = ((t >> m) << (m + 1)) | (1 << m)
            ti, si = a + (t % (1 << m)), a - 1
            buf[:, ti] = op(buf[:, ti], buf[:, si])
        out[:, c0:c0 + part.shape[1]] = buf[:, :part.shape[1]]
        total = buf[:, 2 * nx - 1]
    return out


def _outer_scan(x3, op):
    """tensor_kernel_scan_outer_dim: (outer, row, inner), each inner row scanned sequentially."""
    out = torch.empty_like(x3)
    acc = x3[:, 0]
    out[:, 0] = acc
    for i in range(1, x3.shape[1]):
        acc = op(acc, x3[:, i])
        out[:, i] = acc
    return out


def gpu_scan(x, dim, kind):
    """cumsum (kind "sum") / cumprod ("prod") of x along dim, as CUDA's kernels compute it for x's dtype."""
    op = _ops(kind, x.dtype)
    if x.dim() == 0:
        return x.clone()
    dim = dim % x.dim()
    xc = x.contiguous()
    if x.numel() == 0:
        return xc.clone()
    if xc.numel() == xc.shape[dim]:
        return _cub_scan(xc.reshape(-1), op).view(x.shape)
    if dim == x.dim() - 1:
        return _innermost_scan(xc.reshape(-1, x.shape[dim]), op).view(x.shape)
    outer = 1
    for s in x.shape[:dim]:
        outer *= s
    return _outer_scan(xc.reshape(outer, x.shape[dim], -1), op).view(x.shape)


def _kernel(kind, inplace):
    def run(x, dim, dtype=None):
        y = x.to(dtype) if dtype is not None else x  # cumsum_out casts first, then scans in the result's type
        r = gpu_scan(y, dim, kind)
        return x.copy_(r) if inplace else r
    return run


_SCANS = {aten.cumsum.default: ("sum", False), aten.cumprod.default: ("prod", False),
          aten.cumsum_.default: ("sum", True), aten.cumprod_.default: ("prod", True)}


def _result_dtype(args, kwargs):
    dt = kwargs.get("dtype", args[2] if len(args) > 2 else None)
    return dt if dt is not None else _sim_of(args[0]).dtype


@register(*_SCANS)
def _scan(me, func, args, kwargs):
    kind, inplace = _SCANS[func]
    info = op_info(func)
    kernel = _kernel(kind, inplace) if _result_dtype(args, kwargs) in _LOW else None
    if inplace:
        return _inplace(me, func, info, args, kwargs, kernel=kernel)
    return _functional(me, func, info, args, kwargs, kernel=kernel)
