"""CUDA kernels a CPU build of torch lacks, for ops that would otherwise decompose before simdist sees them.

An aten op registered both with backend kernels and with a CompositeImplicitAutograd kernel takes the backend
kernel where the tensor's backend has one, and the decomposition elsewhere: for an autograd key, the
CompositeImplicitAutograd kernel is used "only when there's no direct registration to its corresponding backend
key" (aten/src/ATen/core/dispatch/OperatorEntry.cpp, computeDispatchTableEntryWithDebug, step 2.2). On a CUDA
build `aten::silu_backward` of a CUDA tensor is therefore one kernel (silu_backward_out, ActivationSiluKernel.cu:
`dy * s * (1 + x * (1 - s))` in float opmath, rounded once); on a CPU build the CUDA key has no kernel, so at
AutogradCUDA the op decomposes into math_silu_backward's six ops (sigmoid, `1 - s`, two products, a sum and the
product with the gradient, each rounded to the tensor's dtype) above the Python key, and simdist simulated those: other values (bfloat16: 0.03 off the
H200's in 2044 of 4096 elements, docs/gpu/b-series-facts-2026-12-02.json, where the CPU kernel agrees bit for
bit) and other kernels on the stream. Every LLaMA-style SiLU MLP's backward took that path (notes b1).

While a run is installed, each op named below gets a CUDA-key kernel, so that autograd's CUDA entry is the op's
own autograd kernel (VariableType) and the op reaches simdist's dispatch mode whole, as on a GPU; simdist runs the
CPU kernel, the same formula in the same opmath. The registered kernel itself is never reached (a simulated tensor
has the Python key, above the backend); it raises UnsupportedOperation if it is.

The list is native_functions.yaml's ops with a CUDA kernel (directly or through a structured_delegate) and a
CompositeImplicitAutograd kernel; tests/test_torch_surface.py derives it from torchgen's copy of the yaml.
`_fused_rms_norm` is F.rms_norm's forward on CUDA; its backward, `_fused_rms_norm_backward`, has no decomposition
to fall into (it reaches the dispatch mode anyway) and no CPU kernel: rules/norms.py computes it (notes b3).
"""
from __future__ import annotations

import torch

from ..engine.errors import UnsupportedOperation

# op name: why its CUDA kernel matters (the decomposition it replaces)
CUDA_KERNEL_OPS = {
    "silu_backward": "math_silu_backward: 6 ops, each rounded to the dtype",
    "mish_backward": "math_mish_backward: one op per term, each rounded to the dtype",
    "_fused_rms_norm": "rms_norm_composite's ops (pow, mean, add, rsqrt, mul, mul) and their backwards (notes b3)",
}
NOT_MODELLED: dict = {}

_lib = None


def _unreachable(name):
    def kernel(*args, **kwargs):
        raise UnsupportedOperation(f"aten::{name} reached the CUDA kernel simdist registers for the CPU build "
                                   "(simdist/faces/cuda_keys.py): a CUDA tensor that is not simulated")
    return kernel


def install():
    """Register the CUDA kernels this build lacks (none on a CUDA build). Undone by uninstall()."""
    global _lib
    if _lib is not None:
        return
    todo = [n for n in CUDA_KERNEL_OPS if not torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{n}", "CUDA")]
    if not todo:
        return
    lib = torch.library.Library("aten", "IMPL")
    for name in todo:
        lib.impl(name, _unreachable(name), "CUDA")
    _lib = lib


def uninstall():
    global _lib
    if _lib is not None:
        _lib._destroy()
        _lib = None
