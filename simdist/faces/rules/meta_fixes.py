"""Corrections of meta kernels that disagree with the CPU and CUDA kernels: simdist reads an op's output shapes
and dtypes from its meta kernel (simdist/faces/dispatch.py _out_specs), so such a disagreement would be a wrong
tensor on the simulated device. Each fix is applied once per signature, where the spec is cached; the op keeps
the fast path.

- pow(bool tensor, bool exponent): the CPU and CUDA kernels return bool (the result type of a bool tensor and a
  bool scalar, torch.result_type; ATen Pow.cpp), the meta kernel int64 (it promotes the exponent as an integer).
  simdist gave an int64 tensor where a GPU gives bool (measured on an H200, torch 2.11:
  `torch.ones(3, dtype=torch.bool, device="cuda").pow(True).dtype` is torch.bool).
- convolution / convolution_backward: the meta kernel leaves every output row-major ("meta tensors have no
  device info, so the correct format cannot be determined here", torch/_meta_registrations.py meta_conv); the
  kernels give the memory format of the backend they pick (ATen ConvUtils.h: channels_last when the input or the
  weight is channels_last, for cuDNN as for oneDNN), which torch's FakeTensor asks of
  torch._C._select_conv_backend / _conv_determine_backend_memory_format (torch/_subclasses/fake_impls.py conv).
  simdist asks the same of the CPU views of the arguments: the eager CPU layout, bit for bit.
"""
from __future__ import annotations

import torch

from ..op_rules import register_spec_fix
from ..tensor import HostProxy, SimTensor

aten = torch.ops.aten


@register_spec_fix(aten.pow.Tensor_Scalar)
def _pow_bool_bool(args, kwargs, out):
    x = args[0]
    e = args[1] if len(args) > 1 else kwargs.get("exponent")
    if type(x) in (SimTensor, HostProxy) and x.dtype == torch.bool and isinstance(e, bool):
        specs, seq = out
        (shape, stride, _), = specs
        return [(shape, stride, torch.bool)], seq
    return out


def _conv_format(inp, weight, rest, bias_sizes=None):
    stride, padding, dilation, transposed, output_padding, groups = rest
    kw = dict(stride=stride, padding=padding, dilation=dilation, transposed=transposed,
              output_padding=output_padding, groups=groups)
    if bias_sizes is not None:
        kw.update(bias=None, bias_sizes=bias_sizes)
    else:
        kw.update(bias=None)
    i, w = inp._inner, weight._inner
    backend = torch._C._select_conv_backend(i, w, **kw)
    if w.dim() == 3:  # conv1d is run as a 2-d convolution (Convolution.cpp): ask about that one
        i, w = i.contiguous().unsqueeze(2), w.unsqueeze(2)
    return torch._C._conv_determine_backend_memory_format(i, w, backend)


def _in_format(spec, fmt):
    if spec is None or fmt in (None, torch.contiguous_format, torch.preserve_format):
        return spec
    shape, _, dtype = spec
    m = torch.empty(shape, dtype=dtype, device="meta")
    if m.dim() == 3 and fmt == torch.channels_last:
        m = m.unsqueeze(2).to(memory_format=fmt).squeeze(2)
    elif (m.dim(), fmt) in ((4, torch.channels_last), (5, torch.channels_last_3d)):
        m = m.to(memory_format=fmt)
    else:
        return spec
    return (shape, tuple(m.stride()), dtype)


def _sim(t):
    return type(t) in (SimTensor, HostProxy)


@register_spec_fix(aten.convolution.default)
def _conv_forward_format(args, kwargs, out):
    if kwargs or len(args) != 9 or not (_sim(args[0]) and _sim(args[1])):
        return out
    fmt = _conv_format(_real(args[0]), _real(args[1]), args[3:9])
    specs, seq = out
    return [_in_format(specs[0], fmt)], seq


@register_spec_fix(aten.convolution_backward.default)
def _conv_backward_format(args, kwargs, out):
    if kwargs or len(args) != 11 or not (_sim(args[1]) and _sim(args[2])):
        return out
    fmt = _conv_format(_real(args[1]), _real(args[2]), args[4:10], bias_sizes=args[3])
    specs, seq = out
    return [_in_format(specs[0], fmt), _in_format(specs[1], fmt), specs[2]], seq


def _real(t):
    return t._sim if type(t) is HostProxy else t


# --- dtypes the CUDA kernels do not implement ------------------------------------------------------------------
# cuBLAS-backed products have no integer or bool kernels on CUDA (aten/src/ATen/native/cuda/Blas.cpp dispatches
# on floating and complex types only), while the CPU kernels simdist runs compute them: `int_tensor @ int_tensor`
# on a GPU raises NotImplementedError '"addmm_cuda" not implemented for 'Long'' at the call. Measured on an H200
# (torch 2.11) for int64 / int32 / int8 / uint8 / bool and mm, addmm, addbmm, linear, tensordot ("addmm_cuda"),
# bmm, baddbmm, 3-d matmul and einsum ("baddbmm_cuda"), mv, addmv ("addmv_impl_cuda"), dot and vdot ("dot");
# torch.outer (a broadcast mul) and torch._int_mm work. Raised where simdist reads the output spec, once per call
# (the spec of a refused signature is never cached), so float products keep the fast path.
_C10_NAMES = {torch.int64: "Long", torch.int32: "Int", torch.int16: "Short", torch.int8: "Char", torch.uint8: "Byte",
              torch.bool: "Bool",  # and float8 (the H200 too: '"addmm_cuda" / "baddbmm_cuda" / "dot" not implemented
              torch.float8_e4m3fn: "Float8_e4m3fn", torch.float8_e5m2: "Float8_e5m2"}  # for 'Float8_e4m3fn'')
_NO_CUDA_INTEGER_KERNEL = {aten.mm.default: "addmm_cuda", aten.addmm.default: "addmm_cuda",
                           aten.addbmm.default: "addmm_cuda", aten.bmm.default: "baddbmm_cuda",
                           aten.baddbmm.default: "baddbmm_cuda", aten.mv.default: "addmv_impl_cuda",
                           aten.addmv.default: "addmv_impl_cuda", aten.dot.default: "dot", aten.vdot.default: "dot",
                           aten.avg_pool2d.default: "avg_pool2d_out_cuda_frame"}  # (the H200 too, for int64)


def _no_cuda_integer_kernel(kernel):
    def fix(args, kwargs, out):
        dts = {a.dtype for a in args if type(a) in (SimTensor, HostProxy)}
        if len(dts) == 1 and next(iter(dts)) in _C10_NAMES:  # (mixed dtypes: "expected m1 and m2 to have the same
            dt = next(iter(dts))                              # dtype", checked first, by the kernel)
            raise NotImplementedError(f'"{kernel}" not implemented for \'{_C10_NAMES[dt]}\'')
        return out
    return fix


for _op, _kernel in _NO_CUDA_INTEGER_KERNEL.items():
    register_spec_fix(_op)(_no_cuda_integer_kernel(_kernel))
