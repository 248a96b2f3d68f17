"""Cost model: virtual nanoseconds for device work, before the policy's jitter.

Numbers are H200-like orders of magnitude; only ratios matter for which
interleavings are plausible, and every duration is then scaled by the policy.
"""
KERNEL_FIXED_NS = 2_500
HBM_BYTES_PER_NS = 3_000  # ~3 TB/s
FLOPS_PER_NS = 400_000  # ~400 TFLOP/s dense bf16
NCCL_LATENCY_NS = 15_000
NCCL_BYTES_PER_NS = 150  # ~150 GB/s per direction over NVLink
SLEEP_CYCLES_PER_NS = 1.98  # torch.cuda._sleep counts SM clock cycles (~1.98 GHz)


def kernel_ns(nbytes: int, flops: int = 0) -> int:
    return KERNEL_FIXED_NS + nbytes // HBM_BYTES_PER_NS + flops // FLOPS_PER_NS


def collective_ns(kind: str, nbytes: int, nranks: int) -> int:
    """Ring model: all_reduce moves 2(n-1)/n of the buffer, gathers/scatters (n-1)/n of the total."""
    if nranks <= 1:
        return NCCL_LATENCY_NS // 4
    if kind in ("all_reduce",):
        moved = 2 * (nranks - 1) * nbytes // nranks
    elif kind in ("all_gather", "reduce_scatter", "all_to_all"):
        moved = (nranks - 1) * nbytes // nranks
    else:  # broadcast, reduce, p2p, gather, scatter: one pipelined pass
        moved = nbytes
    return NCCL_LATENCY_NS + moved // NCCL_BYTES_PER_NS


def sleep_ns(cycles: int) -> int:
    return max(1, int(cycles / SLEEP_CYCLES_PER_NS))
