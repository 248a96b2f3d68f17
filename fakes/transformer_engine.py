"""Fake of TransformerEngine's FP8 quantized tensors, written as ordinary torch code.

Every computation is a plain, vectorised tensor op (elementwise, amax, views, casts,
``.view(dtype)`` bit reinterpretation, ``torch.where``, ``F.pad``), so the same code
runs on CPU tensors, on real GPUs and inside the simdist simulator.  Nothing reads a
tensor value back to Python.

Numerics mirror these TransformerEngine (TE) sources:

* ``common/recipe/recipe_common.cuh`` ``compute_scale_from_amax``: per-block /
  per-tensor scale from amax (epsilon floor, 0/inf/NaN -> 1, overflow -> largest finite
  value of the *input* dtype for block scaling, power-of-two by masking mantissa bits).
* ``common/transpose/quantize_transpose_square_blockwise.cu`` (128x128) and
  ``quantize_transpose_vector_blockwise.cu`` (1x128 / 128x1): partial tiles are
  allowed; amax uses ``fmaxf`` (ignores NaN); ``scale_inv = 1 / scale``; data is
  ``static_cast<fp8>(float(x) * scale)``, a saturating (satfinite) round-to-nearest cast.
* ``pytorch/csrc/quantizer.cpp`` ``Float8BlockQuantizer::get_scale_shape`` and
  ``MXFP8Quantizer::get_scale_shape``: scale-inverse buffer shapes and padding.
* ``common/util/ptx.cuh`` ``float_to_e8m0`` / ``exp2f_rcp`` / ``exp2f``: MXFP8 E8M0 scales.
* ``pytorch/tensor/quantized_tensor.py`` ``QuantizedTensor.__torch_dispatch__``:
  unimplemented ops run on a dequantized temporary; ``copy_`` into a quantized tensor
  re-quantizes in place.
* ``pytorch/tensor/storage/float8_blockwise_tensor_storage.py``: dequantize layouts.
* ``common/recipe/__init__.py``: ``Float8BlockScaling`` recipe defaults.
"""

from __future__ import annotations

import copy as _copy
import enum
import math
import os
import struct
from dataclasses import dataclass, field
from typing import Any, Dict, NamedTuple, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch.utils._pytree import tree_map

aten = torch.ops.aten

__all__ = [
    "TE_DType",
    "tex_DType",
    "Float8BlockScaleTensorFormat",
    "Quantizer",
    "QuantizedTensor",
    "Float8BlockQuantizer",
    "Float8BlockwiseQTensor",
    "Float8Quantizer",
    "Float8CurrentScalingQuantizer",
    "Float8Tensor",
    "MXFP8Quantizer",
    "MXFP8Tensor",
    "Format",
    "QParams",
    "Float8BlockScaling",
    "blockwise_fp32_scales_from_env",
]


# --------------------------------------------------------------------------- dtypes


class TE_DType(enum.IntEnum):
    """Subset of ``transformer_engine_torch.DType`` (values follow ``NVTEDType``)."""

    kByte = 0
    kInt16 = 1
    kInt32 = 2
    kInt64 = 3
    kFloat32 = 4
    kFloat16 = 5
    kBFloat16 = 6
    kFloat8E4M3 = 7
    kFloat8E5M2 = 8
    kFloat8E8M0 = 9


tex_DType = TE_DType


class Float8BlockScaleTensorFormat(enum.Enum):
    """``tex.Float8BlockScaleTensorFormat``: layout of 1D block-scaled data and scales."""

    GEMM_READY = 0
    COMPACT = 1


_TE_TO_TORCH_FP8 = {
    TE_DType.kFloat8E4M3: torch.float8_e4m3fn,
    TE_DType.kFloat8E5M2: torch.float8_e5m2,
}
# Max finite magnitudes (TE F8LimitsTrait / TypeInfo::max_finite_value).
_FP8_MAX = {torch.float8_e4m3fn: 448.0, torch.float8_e5m2: 57344.0}
_INPUT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)

_BLOCK_LEN = 128  # Float8BlockQuantizer.block_len
_MXFP8_BLOCK = 32  # MXFP8_BLOCK_SCALING_SIZE
_POW2_MASK = -8388608  # 0xFF800000 as int32: keep sign + exponent bits
_MANTISSA_BITS = 8388608  # 1 << 23
_FLT_MAX = torch.finfo(torch.float32).max
# Quantized_Limits<T>::max_norm_rcp: 1 / max rounded to fp32 (exact as a Python float).
_FP8_MAX_RCP = {d: struct.unpack("<f", struct.pack("<f", 1.0 / m))[0] for d, m in _FP8_MAX.items()}


def _torch_fp8(fp8_dtype: Any) -> torch.dtype:
    """Map a TE_DType member or a torch float8 dtype to the torch float8 dtype."""
    if isinstance(fp8_dtype, torch.dtype):
        if fp8_dtype in _FP8_MAX:
            return fp8_dtype
    else:
        try:
            return _TE_TO_TORCH_FP8[TE_DType(int(fp8_dtype))]
        except (KeyError, ValueError, TypeError):
            pass
    raise ValueError(
        f"fp8_dtype must be TE_DType.kFloat8E4M3/kFloat8E5M2 or torch.float8_e4m3fn/"
        f"torch.float8_e5m2, got {fp8_dtype!r}"
    )


def _round_up(x: int, m: int) -> int:
    return (x + m - 1) // m * m


def _flat_2d(shape: Sequence[int]) -> Tuple[int, int]:
    """TE flattens to (M, K): K = last dim, M = product of the leading dims."""
    shape = tuple(shape)
    k = shape[-1] if shape else 1
    return math.prod(shape[:-1]), k


def _columnwise_shape(shape: Sequence[int]) -> Tuple[int, ...]:
    """Transposed data shape (d_n, d_1, ..., d_{n-1}) (TE ``get_columnwise_shape``)."""
    shape = tuple(shape)
    return (shape[-1],) + shape[:-1] if shape else ()


# --------------------------------------------------------------------------- numerics


def _abs_ignoring_nan(x32: torch.Tensor) -> torch.Tensor:
    # CUDA fmaxf(amax, NaN) keeps amax, so NaNs never raise a block's amax.
    return torch.nan_to_num(x32.abs(), nan=0.0, posinf=float("inf"))


def _scale_from_amax(
    amax: torch.Tensor, fp8_max: float, pow2: bool, eps: float, value_for_inf: float
) -> torch.Tensor:
    """Vectorised ``compute_scale_from_amax`` (common/recipe/recipe_common.cuh)."""
    amax = amax.masked_fill(amax < eps, eps)  # NaN < eps is False, as in CUDA
    unit = torch.isinf(amax) | (amax == 0) | torch.isnan(amax)
    # Tensor/tensor division: `python_float / t` is reciprocal(t) * x in torch (not RN).
    scale = torch.full_like(amax, fp8_max) / amax
    scale = scale.masked_fill(torch.isinf(scale), value_for_inf)
    if pow2:
        scale = torch.bitwise_and(scale.view(torch.int32), _POW2_MASK).view(torch.float32)
    return scale.masked_fill(unit, 1.0)


def _reciprocal(scale: torch.Tensor) -> torch.Tensor:
    # Kernels store 1.0f / scale (IEEE division); avoid `1 / t` (see above).
    return torch.ones_like(scale) / scale


def _saturating_cast(y32: torch.Tensor, fp8: torch.dtype) -> torch.Tensor:
    """FP32 -> FP8 bits as uint8, like CUDA ``__nv_fp8_*(float)`` (RN + satfinite).

    Out-of-range values and +-inf clamp to +-max; NaN becomes the canonical 0x7F.
    (torch's own casts disagree across devices on overflow and NaN sign.)
    """
    m = _FP8_MAX[fp8]
    q = y32.clamp(-m, m).to(fp8).view(torch.uint8)
    return q.masked_fill(torch.isnan(y32), 0x7F)


def _float_to_e8m0(val: torch.Tensor) -> torch.Tensor:
    """``ptx::float_to_e8m0`` for val >= 0: round the exponent up, saturating (uint8)."""
    bits = val.view(torch.int32)
    exp = torch.div(bits, _MANTISSA_BITS, rounding_mode="floor")
    man = torch.bitwise_and(bits, 0x7FFFFF)
    up = (man > 0) & (exp != 0xFE) & ~((exp == 0) & (man <= 0x400000))
    e = exp + up.to(torch.int32)
    e = torch.where(torch.isinf(val), 0xFE, e)
    e = torch.where(torch.isnan(val), 0xFF, e)
    e = torch.where(val == 0, 0, e)
    return e.to(torch.uint8)


def _exp2f_rcp(e: torch.Tensor) -> torch.Tensor:
    """``ptx::exp2f_rcp``: 2^(127 - e) as fp32 bits, with e == 0 mapped to 1."""
    e = e.to(torch.int32)
    return torch.where(e == 0, 1.0, ((254 - e) * _MANTISSA_BITS).view(torch.float32))


def _exp2f(e: torch.Tensor) -> torch.Tensor:
    """``ptx::exp2f``: 2^(e - 127) built from bits (e == 0 -> 0.0, e == 255 -> inf)."""
    return (e.to(torch.int32) * _MANTISSA_BITS).view(torch.float32)


def _as_input(src: torch.Tensor, dst: "QuantizedTensor") -> torch.Tensor:
    """Validate and normalise a quantization source (TE ``update_quantized`` preamble)."""
    if isinstance(src, QuantizedTensor):
        src = src.dequantize()
    if src.dtype not in _INPUT_DTYPES:
        raise ValueError(f"src dtype must be one of {_INPUT_DTYPES}, got {src.dtype}")
    if tuple(src.shape) != tuple(dst.shape):
        raise ValueError(f"src shape {tuple(src.shape)} does not match dst shape {tuple(dst.shape)}")
    if src.device != dst.device:
        src = src.to(device=dst.device)
    return src.contiguous()


def _store(buf: torch.Tensor, new: torch.Tensor, noop_flag: Optional[torch.Tensor]) -> None:
    """Write `new` into `buf` in place; keep `buf` where noop_flag == 1 (TE noop tensor)."""
    if noop_flag is not None:
        new = torch.where(noop_flag.reshape(()) == 1.0, buf, new)
    buf.copy_(new)


# --------------------------------------------------------------------------- base classes


def _contiguous_strides(shape: Sequence[int]) -> Tuple[int, ...]:
    strides, acc = [], 1
    for s in reversed(tuple(shape)):
        strides.append(acc)
        acc *= max(int(s), 1)
    return tuple(reversed(strides))


class Quantizer:
    """Builder of quantized tensors (TE ``pytorch/quantized_tensor.py`` ``Quantizer``)."""

    def __init__(self, *, rowwise: bool = True, columnwise: bool = True) -> None:
        self.rowwise_usage = rowwise
        self.columnwise_usage = columnwise
        self.internal = False

    def set_usage(self, *, rowwise: Optional[bool] = None, columnwise: Optional[bool] = None):
        """Set which data layouts later quantizations produce."""
        if rowwise is not None:
            self.rowwise_usage = rowwise
        if columnwise is not None:
            self.columnwise_usage = columnwise

    def copy(self) -> "Quantizer":
        """Shallow copy (state tensors such as scale/amax stay shared, as in TE)."""
        return _copy.copy(self)

    def __call__(self, tensor: torch.Tensor) -> "QuantizedTensor":
        return self.quantize(tensor)

    def quantize(
        self,
        tensor: torch.Tensor,
        *,
        out: Optional["QuantizedTensor"] = None,
        dtype: Optional[torch.dtype] = None,
    ) -> "QuantizedTensor":
        """Quantize into `out`, or into a new tensor whose nominal dtype is the input's."""
        if out is not None:
            return self.update_quantized(tensor, out)
        if isinstance(tensor, QuantizedTensor):
            tensor = tensor.dequantize()
        dst = self.make_empty(tensor.shape, dtype=dtype or tensor.dtype, device=tensor.device)
        return self.update_quantized(tensor, dst)

    def make_empty(self, shape, *, dtype=torch.float32, device=None, requires_grad=False):
        raise NotImplementedError

    def update_quantized(self, src, dst, *, noop_flag=None):
        raise NotImplementedError

    def calibrate(self, tensor: torch.Tensor) -> None:  # pylint: disable=unused-argument
        """No-op except for delayed scaling."""

    def is_quantizable(self, inp: torch.Tensor) -> bool:  # pylint: disable=unused-argument
        """Whether the tensor supports quantized all-gather (TE naming)."""
        return True


class QuantizedTensor(torch.Tensor):
    """Wrapper subclass presenting quantized buffers as a tensor of a nominal dtype.

    Mirrors ``QuantizedTensor.__torch_dispatch__`` (TE ``quantized_tensor.py``):
    ``detach`` and same-size ``view`` keep the quantized type, ``copy_`` into a quantized
    tensor re-quantizes into its buffers, in-place ops dequantize/run/re-quantize, and
    every other op runs on dequantized temporaries.  Only instances of this class are
    unwrapped and ``func`` is then called normally, so other tensor subclasses holding
    the inner buffers (e.g. simdist's device tensors) dispatch as usual.
    """

    _quantizer: Optional[Quantizer]
    _fp8_dtype: Any

    @staticmethod
    def __new__(cls, shape, dtype, *, device, requires_grad=False):
        shape = tuple(int(s) for s in shape)
        return torch.Tensor._make_wrapper_subclass(
            cls,
            shape,
            strides=_contiguous_strides(shape),
            storage_offset=0,
            dtype=dtype,
            layout=torch.strided,
            device=device,
            requires_grad=requires_grad,
        )

    # Plain torch functions reach __torch_dispatch__ untouched (TE does the same).
    __torch_function__ = torch._C._disabled_torch_function_impl

    # ---- interface implemented by subclasses
    def dequantize(self, dtype: Optional[torch.dtype] = None) -> torch.Tensor:
        raise NotImplementedError

    def get_metadata(self) -> Dict[str, Any]:
        raise NotImplementedError

    def _buffers(self) -> Dict[str, Optional[torch.Tensor]]:
        """Data-carrying buffers, by constructor keyword (cloned by ``clone``)."""
        raise NotImplementedError

    def _view_shape(self, shape: Tuple[int, ...]) -> "QuantizedTensor":
        raise NotImplementedError(f"{type(self).__name__} does not support changing shape with view")

    # ---- shared behaviour
    def _get_quantizer(self) -> Quantizer:
        if self._quantizer is None:
            raise ValueError(f"{type(self).__name__} has no quantizer")
        return self._quantizer

    def quantize_(self, tensor: torch.Tensor, *, noop_flag: Optional[torch.Tensor] = None):
        """Re-quantize `tensor` into this tensor's existing buffers."""
        if isinstance(tensor, QuantizedTensor):
            tensor = tensor.dequantize()
        self._get_quantizer().update_quantized(tensor, self, noop_flag=noop_flag)
        return self

    @classmethod
    def make_like(cls, tensor: "QuantizedTensor", *, shape=None, dtype=None, requires_grad=False):
        """New tensor sharing `tensor`'s buffers (TE ``make_like``)."""
        return cls(
            shape=tensor.shape if shape is None else shape,
            dtype=tensor.dtype if dtype is None else dtype,
            requires_grad=requires_grad,
            **tensor.get_metadata(),
        )

    def detach(self) -> "QuantizedTensor":
        return type(self).make_like(self)

    def clone(self) -> "QuantizedTensor":
        meta = self.get_metadata()
        for name, buf in self._buffers().items():
            meta[name] = None if buf is None else buf.detach().clone()
        return type(self)(shape=self.shape, dtype=self.dtype, **meta)

    def to_dtype(self, dtype: torch.dtype) -> "QuantizedTensor":
        """Same data, different nominal dtype."""
        return type(self).make_like(self, dtype=dtype)

    def __repr__(self, *, tensor_contents=None) -> str:  # pylint: disable=unused-argument
        return (
            f"{type(self).__name__}(shape={tuple(self.shape)}, dtype={self.dtype}, "
            f"fp8_dtype={self._fp8_dtype!r}, device={self.device})"
        )

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}

        if func is aten.detach.default:
            return args[0].detach()

        if func is aten.copy_.default:
            dst, src = args[0], args[1]
            if isinstance(dst, QuantizedTensor):
                dst.quantize_(src)
            else:
                if isinstance(src, QuantizedTensor):
                    src = src.dequantize()
                dst.copy_(src, *args[2:], **kwargs)
            return dst

        if func is aten.view.default:
            tensor, shape = args[0], tuple(args[1])
            if -1 in shape:  # resolve an inferred dimension
                known = math.prod(s for s in shape if s != -1)
                shape = tuple(tensor.numel() // max(known, 1) if s == -1 else s for s in shape)
            if shape == tuple(tensor.shape):
                return type(tensor).make_like(tensor)
            return tensor._view_shape(shape)

        def unwrap(arg):
            return arg.dequantize(dtype=arg.dtype) if isinstance(arg, QuantizedTensor) else arg

        new_args, new_kwargs = tree_map(unwrap, args), tree_map(unwrap, kwargs)
        out = func(*new_args, **new_kwargs)

        if func._schema.is_mutable:
            # In-place op ran on a dequantized temporary: quantize the result back.
            schema_args = func._schema.arguments
            pairs = list(zip(args, new_args, schema_args))
            pairs += [(kwargs[a.name], new_kwargs[a.name], a) for a in schema_args if a.name in kwargs]
            result = out
            for old, new, schema_arg in pairs:
                info = getattr(schema_arg, "alias_info", None)
                if isinstance(old, QuantizedTensor) and info is not None and info.is_write:
                    old.quantize_(new)
                    if out is new:
                        result = old
            return result
        return out


# --------------------------------------------------------------------------- blockwise


class Float8BlockQuantizer(Quantizer):
    """Blockwise FP8 current scaling: 128x128 tiles (dim 2) or 1x128 vectors (dim 1).

    Mirrors ``pytorch/tensor/float8_blockwise_tensor.py`` and ``csrc/quantizer.cpp``.
    Partial tiles are allowed like TE's "notaligned" kernels (amax over the valid
    elements); ``is_quantizable`` reports TE's 128-divisibility condition.
    ``all_gather_usage=True`` selects TE's COMPACT format (1D only).
    """

    def __init__(
        self,
        fp8_dtype: Any,
        *,
        rowwise: bool = True,
        columnwise: bool = False,
        amax_epsilon: float = 0.0,
        force_pow_2_scales: bool = True,
        block_scaling_dim: int = 2,
        all_gather_usage: bool = False,
    ) -> None:
        super().__init__(rowwise=rowwise, columnwise=columnwise)
        _torch_fp8(fp8_dtype)
        if block_scaling_dim not in (1, 2):
            raise ValueError(f"block_scaling_dim must be 1 or 2, got {block_scaling_dim}")
        if block_scaling_dim == 2 and all_gather_usage:
            # quantizer.cpp: "2D scaling is always GEMM_READY for now."
            raise ValueError("all_gather_usage (COMPACT format) requires block_scaling_dim=1")
        self.dtype = fp8_dtype
        self.block_len = _BLOCK_LEN
        self.amax_epsilon = amax_epsilon
        self.force_pow_2_scales = force_pow_2_scales
        self.block_scaling_dim = block_scaling_dim
        self.all_gather_usage = all_gather_usage

    @property
    def data_format(self) -> Float8BlockScaleTensorFormat:
        """COMPACT when ``all_gather_usage`` else GEMM_READY (quantizer.cpp)."""
        if self.all_gather_usage:
            return Float8BlockScaleTensorFormat.COMPACT
        return Float8BlockScaleTensorFormat.GEMM_READY

    def get_scale_shape(self, shape: Sequence[int], columnwise: bool) -> Tuple[int, int]:
        """Scale-inverse buffer shape (``Float8BlockQuantizer::get_scale_shape``)."""
        m, k = _flat_2d(shape)
        b = self.block_len
        mt, kt = -(-m // b), -(-k // b)
        if self.block_scaling_dim == 2:
            return (kt, _round_up(mt, 4)) if columnwise else (mt, _round_up(kt, 4))
        compact = self.all_gather_usage
        if columnwise:
            return (mt, k if compact else _round_up(k, 4))
        return (m, kt) if compact else (kt, _round_up(m, 4))

    def get_columnwise_shape(self, shape: Sequence[int]) -> Tuple[int, ...]:
        """Column-wise data is transposed, except in the COMPACT format."""
        return tuple(shape) if self.all_gather_usage else _columnwise_shape(shape)

    def is_quantizable(self, inp: torch.Tensor) -> bool:
        shape = tuple(inp.shape)
        return len(shape) >= 2 and shape[-1] % self.block_len == 0 and math.prod(shape[:-1]) % self.block_len == 0

    def _alloc(self, shape, columnwise: bool, device) -> Tuple[torch.Tensor, torch.Tensor]:
        data_shape = self.get_columnwise_shape(shape) if columnwise else tuple(shape)
        data = torch.empty(data_shape, dtype=torch.uint8, device=device)
        # Padding entries stay uninitialised, as with TE's at::empty.
        scale_inv = torch.empty(self.get_scale_shape(shape, columnwise), dtype=torch.float32, device=device)
        return data, scale_inv

    def make_empty(self, shape, *, dtype=torch.float32, device=None, requires_grad=False):
        device = torch.device("cuda") if device is None else device
        shape = tuple(shape)
        row = self._alloc(shape, False, device) if self.rowwise_usage else (None, None)
        col = self._alloc(shape, True, device) if self.columnwise_usage else (None, None)
        return Float8BlockwiseQTensor(
            shape=shape,
            dtype=dtype,
            rowwise_data=row[0],
            rowwise_scale_inv=row[1],
            columnwise_data=col[0],
            columnwise_scale_inv=col[1],
            fp8_dtype=self.dtype,
            quantizer=self,
            is_2D_scaled=self.block_scaling_dim == 2,
            data_format=self.data_format,
            requires_grad=requires_grad,
        )

    def _scales(self, amax: torch.Tensor, fp8: torch.dtype, in_dtype: torch.dtype) -> torch.Tensor:
        # value_for_inf = TypeInfo<IType>::max_finite_value (input dtype, not fp32).
        return _scale_from_amax(
            amax, _FP8_MAX[fp8], self.force_pow_2_scales, self.amax_epsilon, torch.finfo(in_dtype).max
        )

    def update_quantized(self, src, dst, *, noop_flag=None):
        """Quantize `src` into `dst`'s buffers in place (TE ``tex.quantize``)."""
        if not isinstance(dst, Float8BlockwiseQTensor):
            raise TypeError(f"Cannot store quantized blockwise tensor in {type(dst)} type.")
        src = _as_input(src, dst)
        self._coerce_buffers(dst)
        if src.numel() == 0:
            return dst
        fp8 = _torch_fp8(self.dtype)
        shape = tuple(dst.shape)
        m, k = _flat_2d(shape)
        b = self.block_len
        mt, kt = -(-m // b), -(-k // b)
        x = src.reshape(m, k).float()
        compact = self.all_gather_usage

        if self.block_scaling_dim == 2:
            # 128x128 tiles: one scale per tile, shared by both layouts.
            xp = F.pad(x, (0, kt * b - k, 0, mt * b - m)).view(mt, b, kt, b)
            scale = self._scales(_abs_ignoring_nan(xp).amax(dim=(1, 3)), fp8, src.dtype)
            q = _saturating_cast(xp * scale.view(mt, 1, kt, 1), fp8).view(mt * b, kt * b)[:m, :k]
            sinv = _reciprocal(scale)  # (mt, kt)
            if dst._rowwise_data is not None:
                _store(dst._rowwise_data.view(m, k), q, noop_flag)
                _store(dst._rowwise_scale_inv[:, :kt], sinv, noop_flag)
            if dst._columnwise_data is not None:
                _store(dst._columnwise_data.view(k, m), q.t(), noop_flag)
                _store(dst._columnwise_scale_inv[:, :mt], sinv.t(), noop_flag)
        else:
            if dst._rowwise_data is not None:
                # 1x128 vectors along K.
                xp = F.pad(x, (0, kt * b - k)).view(m, kt, b)
                scale = self._scales(_abs_ignoring_nan(xp).amax(dim=2), fp8, src.dtype)  # (m, kt)
                q = _saturating_cast(xp * scale.unsqueeze(2), fp8).view(m, kt * b)[:, :k]
                sinv = _reciprocal(scale)
                _store(dst._rowwise_data.view(m, k), q, noop_flag)
                if compact:
                    _store(dst._rowwise_scale_inv, sinv, noop_flag)
                else:  # GEMM_READY stores the scales transposed, M padded to 4
                    _store(dst._rowwise_scale_inv[:, :m], sinv.t(), noop_flag)
            if dst._columnwise_data is not None:
                # 128x1 vectors along M.
                xp = F.pad(x, (0, 0, 0, mt * b - m)).view(mt, b, k)
                scale = self._scales(_abs_ignoring_nan(xp).amax(dim=1), fp8, src.dtype)  # (mt, k)
                q = _saturating_cast(xp * scale.unsqueeze(1), fp8).view(mt * b, k)[:m]
                sinv = _reciprocal(scale)
                if compact:  # data kept in the logical (M, K) layout
                    _store(dst._columnwise_data.view(m, k), q, noop_flag)
                    _store(dst._columnwise_scale_inv, sinv, noop_flag)
                else:
                    _store(dst._columnwise_data.view(k, m), q.t(), noop_flag)
                    _store(dst._columnwise_scale_inv[:, :k], sinv, noop_flag)
        dst._fp8_dtype = self.dtype
        return dst

    def _coerce_buffers(self, dst: "Float8BlockwiseQTensor") -> None:
        """Allocate/drop buffers to match this quantizer's usages (convert_and_update_tensor)."""
        shape = tuple(dst.shape)
        if self.rowwise_usage and dst._rowwise_data is None:
            dst._rowwise_data, dst._rowwise_scale_inv = self._alloc(shape, False, dst.device)
        elif not self.rowwise_usage:
            dst._rowwise_data = dst._rowwise_scale_inv = None
        if self.columnwise_usage and dst._columnwise_data is None:
            dst._columnwise_data, dst._columnwise_scale_inv = self._alloc(shape, True, dst.device)
        elif not self.columnwise_usage:
            dst._columnwise_data = dst._columnwise_scale_inv = None
        dst._is_2D_scaled = self.block_scaling_dim == 2
        dst._data_format = self.data_format


def _dequant_tiles_2d(q: torch.Tensor, sinv: torch.Tensor, fp8: torch.dtype, dtype) -> torch.Tensor:
    """(R, C) uint8 with one scale per 128x128 tile -> (R, C) of `dtype`."""
    r, c = q.shape
    b = _BLOCK_LEN
    rt, ct = -(-r // b), -(-c // b)
    qp = q if (rt * b, ct * b) == (r, c) else F.pad(q, (0, ct * b - c, 0, rt * b - r))  # pad only partial tiles
    out = qp.view(rt, b, ct, b).view(fp8).float() * sinv[:, :ct].reshape(rt, 1, ct, 1)
    return out.view(rt * b, ct * b)[:r, :c].to(dtype)


def _dequant_inner_1d(q: torch.Tensor, s: torch.Tensor, fp8: torch.dtype, dtype) -> torch.Tensor:
    """(R, C) uint8 with one scale per 1x128 run along C; `s` is (R, ceil(C/128))."""
    r, c = q.shape
    b = _BLOCK_LEN
    ct = -(-c // b)
    qp = F.pad(q, (0, ct * b - c)).view(r, ct, b)
    out = qp.view(fp8).float() * s.reshape(r, ct, 1)
    return out.view(r, ct * b)[:, :c].to(dtype)


def _dequant_outer_1d(q: torch.Tensor, s: torch.Tensor, fp8: torch.dtype, dtype) -> torch.Tensor:
    """(R, C) uint8 with one scale per 128x1 run along R; `s` is (ceil(R/128), C)."""
    r, c = q.shape
    b = _BLOCK_LEN
    rt = -(-r // b)
    qp = F.pad(q, (0, 0, 0, rt * b - r)).view(rt, b, c)
    out = qp.view(fp8).float() * s.reshape(rt, 1, c)
    return out.view(rt * b, c)[:r].to(dtype)


class Float8BlockwiseQTensor(QuantizedTensor):
    """FP8 data with 128x128 or 1x128 block scales (TE ``Float8BlockwiseQTensor``)."""

    @staticmethod
    def __new__(
        cls,
        *,
        shape,
        dtype,
        rowwise_data,
        rowwise_scale_inv,
        columnwise_data,
        columnwise_scale_inv,
        fp8_dtype,
        quantizer,
        is_2D_scaled,
        data_format=Float8BlockScaleTensorFormat.GEMM_READY,
        requires_grad=False,
        device=None,
    ):
        data = rowwise_data if rowwise_data is not None else columnwise_data
        device = data.device if data is not None else (device or torch.device("cuda"))
        self = QuantizedTensor.__new__(cls, shape, dtype, device=device, requires_grad=requires_grad)
        self._rowwise_data = rowwise_data
        self._rowwise_scale_inv = rowwise_scale_inv
        self._columnwise_data = columnwise_data
        self._columnwise_scale_inv = columnwise_scale_inv
        self._fp8_dtype = fp8_dtype
        self._quantizer = quantizer.copy() if quantizer is not None else None
        self._is_2D_scaled = is_2D_scaled
        self._data_format = data_format
        return self

    def get_metadata(self) -> Dict[str, Any]:
        return {
            "rowwise_data": self._rowwise_data,
            "rowwise_scale_inv": self._rowwise_scale_inv,
            "columnwise_data": self._columnwise_data,
            "columnwise_scale_inv": self._columnwise_scale_inv,
            "fp8_dtype": self._fp8_dtype,
            "quantizer": self._quantizer,
            "is_2D_scaled": self._is_2D_scaled,
            "data_format": self._data_format,
            "device": self.device,
        }

    def _buffers(self):
        return {k: v for k, v in self.get_metadata().items() if k.endswith(("_data", "_scale_inv"))}

    def _is_gemm_ready_format(self) -> bool:
        return self._data_format == Float8BlockScaleTensorFormat.GEMM_READY

    def dequantize(self, dtype: Optional[torch.dtype] = None) -> torch.Tensor:
        """Plain tensor from the rowwise data (else columnwise), as TE's storage class does."""
        dtype = self.dtype if dtype is None else dtype
        fp8 = _torch_fp8(self._fp8_dtype)
        shape = tuple(self.shape)
        m, k = _flat_2d(shape)
        gemm_ready = self._is_gemm_ready_format()
        if self._rowwise_data is not None:
            q, s = self._rowwise_data.reshape(m, k), self._rowwise_scale_inv
            if self._is_2D_scaled:
                out = _dequant_tiles_2d(q, s, fp8, dtype)
            elif gemm_ready:
                out = _dequant_inner_1d(q, s[:, :m].t(), fp8, dtype)
            else:
                out = _dequant_inner_1d(q, s, fp8, dtype)
            return out.reshape(shape)
        if self._columnwise_data is None:
            raise RuntimeError("No data to dequantize")
        s = self._columnwise_scale_inv
        if self._is_2D_scaled:
            out = _dequant_tiles_2d(self._columnwise_data.reshape(k, m), s, fp8, dtype).t()
        elif gemm_ready:  # (K, M) data, runs of 128 along M = its inner dim
            out = _dequant_inner_1d(self._columnwise_data.reshape(k, m), s[:, :k].t(), fp8, dtype).t()
        else:
            out = _dequant_outer_1d(self._columnwise_data.reshape(m, k), s, fp8, dtype)
        return out.reshape(shape)

    def _create_columnwise(self) -> None:
        """2D only: transpose FP8 bytes and tile scales (TE ``_create_columnwise``)."""
        m, k = _flat_2d(self.shape)
        mt, kt = -(-m // _BLOCK_LEN), -(-k // _BLOCK_LEN)
        if self._columnwise_data is None:
            self._columnwise_data = torch.empty(_columnwise_shape(self.shape), dtype=torch.uint8, device=self.device)
        self._columnwise_data.view(k, m).copy_(self._rowwise_data.reshape(m, k).t())
        if self._columnwise_scale_inv is None:
            self._columnwise_scale_inv = torch.empty((kt, _round_up(mt, 4)), dtype=torch.float32, device=self.device)
        self._columnwise_scale_inv[:, :mt].copy_(self._rowwise_scale_inv[:, :kt].t())

    def update_usage(self, rowwise_usage: Optional[bool] = None, columnwise_usage: Optional[bool] = None):
        """Drop one layout, or (2D only) build the columnwise one (TE ``update_usage``)."""
        if rowwise_usage is None:
            rowwise_usage = self._rowwise_data is not None
        if columnwise_usage is None:
            columnwise_usage = self._columnwise_data is not None
        if not (rowwise_usage or columnwise_usage):
            raise RuntimeError("Must retain some data either columnwise or rowwise")
        if rowwise_usage and columnwise_usage:
            if not self._is_2D_scaled:
                # 1D row- and column-scaled data have different scales.
                if self._rowwise_data is None or self._columnwise_data is None:
                    raise RuntimeError("Cannot update to rowwise and columnwise usage.")
            elif self._rowwise_data is None:
                raise RuntimeError("Cannot update to rowwise and columnwise usage because rowwise data is None.")
            elif self._columnwise_data is None or self._columnwise_scale_inv is None:
                self._create_columnwise()
            return
        if rowwise_usage:
            if self._rowwise_data is None:
                raise RuntimeError("Cannot update to rowwise usage.")
            self._columnwise_data = self._columnwise_scale_inv = None
        else:
            if self._columnwise_data is None:
                raise RuntimeError("Cannot update to columnwise usage.")
            self._rowwise_data = self._rowwise_scale_inv = None


# --------------------------------------------------------------------------- per-tensor


class _PerTensorQuantizer(Quantizer):
    """Shared allocation for ``Float8Quantizer`` / ``Float8CurrentScalingQuantizer``."""

    dtype: Any

    def make_empty(self, shape, *, dtype=torch.float32, device=None, requires_grad=False):
        device = torch.device("cuda") if device is None else device
        shape = tuple(shape)
        data = torch.empty(shape, dtype=torch.uint8, device=device) if self.rowwise_usage else None
        transpose = (
            torch.empty(_columnwise_shape(shape), dtype=torch.uint8, device=device)
            if self.columnwise_usage
            else None
        )
        return Float8Tensor(
            shape=shape,
            dtype=dtype,
            data=data,
            fp8_scale_inv=torch.empty(1, dtype=torch.float32, device=device),
            fp8_dtype=self.dtype,
            data_transpose=transpose,
            quantizer=self,
            requires_grad=requires_grad,
        )

    def _write(self, x: torch.Tensor, scale: torch.Tensor, dst: "Float8Tensor", noop_flag) -> None:
        """data = fp8(x * scale) (+ transpose), scale_inv = 1 / scale."""
        if self.rowwise_usage and dst._data is None:
            dst._data = torch.empty(dst.shape, dtype=torch.uint8, device=dst.device)
        if self.columnwise_usage and dst._transpose is None:
            dst._transpose = torch.empty(_columnwise_shape(dst.shape), dtype=torch.uint8, device=dst.device)
        if not self.rowwise_usage:  # Hopper layout: no row-wise data without the usage
            dst._data = None
        if not self.columnwise_usage:
            dst._transpose = None
        m, k = _flat_2d(dst.shape)
        q = _saturating_cast(x.reshape(m, k) * scale.reshape(()), _torch_fp8(self.dtype))
        if dst._data is not None:
            _store(dst._data.view(m, k), q, noop_flag)
        if dst._transpose is not None:
            _store(dst._transpose.view(k, m), q.t(), noop_flag)
        dst._transpose_invalid = dst._transpose is None
        _store(dst._scale_inv, _reciprocal(scale.reshape(1)).reshape(dst._scale_inv.shape), noop_flag)
        dst._fp8_dtype = self.dtype


class Float8Quantizer(_PerTensorQuantizer):
    """Per-tensor delayed scaling: uses the given `scale`, accumulates `amax`.

    Mirrors ``float8_tensor.py`` ``Float8Quantizer`` and the FP8 cast kernel
    (amax of the input is max-ed atomically into `amax`).
    """

    def __init__(self, scale, amax, fp8_dtype, *, rowwise: bool = True, columnwise: bool = True):
        super().__init__(rowwise=rowwise, columnwise=columnwise)
        _torch_fp8(fp8_dtype)
        self.scale = scale
        self.amax = amax
        self.dtype = fp8_dtype

    def update_quantized(self, src, dst, *, noop_flag=None):
        if not isinstance(dst, Float8Tensor):
            raise ValueError("Float8Quantizer can only update Float8Tensor")
        src = _as_input(src, dst)
        if src.numel() == 0:
            return dst
        x = src.float()
        cur = _abs_ignoring_nan(x).amax().reshape(self.amax.shape)
        _store(self.amax, torch.maximum(self.amax, cur), noop_flag)
        self._write(x, self.scale.float(), dst, noop_flag)
        return dst

    def calibrate(self, tensor: torch.Tensor) -> None:
        amin, amax = tensor.aminmax()
        self.amax.copy_(torch.max(-amin, amax))


class Float8CurrentScalingQuantizer(_PerTensorQuantizer):
    """Per-tensor current scaling: amax of the tensor now, scale via compute_scale_from_amax.

    Mirrors ``Float8CurrentScalingQuantizer`` (``float8_tensor.py`` / ``quantizer.cpp``):
    amax kernel, optional MAX all-reduce of amax, scale with value_for_inf = FLT_MAX.
    """

    def __init__(
        self,
        fp8_dtype,
        device,
        *,
        rowwise: bool = True,
        columnwise: bool = True,
        with_amax_reduction: bool = False,
        amax_reduction_group=None,
        force_pow_2_scales: bool = False,
        amax_epsilon: float = 0.0,
    ) -> None:
        super().__init__(rowwise=rowwise, columnwise=columnwise)
        _torch_fp8(fp8_dtype)
        self.scale = torch.empty(1, dtype=torch.float32, device=device)
        self.amax = torch.empty(1, dtype=torch.float32, device=device)
        self.dtype = fp8_dtype
        self.with_amax_reduction = with_amax_reduction
        self.amax_reduction_group = amax_reduction_group
        self.force_pow_2_scales = force_pow_2_scales
        self.amax_epsilon = amax_epsilon

    def update_quantized(self, src, dst, *, noop_flag=None):
        if not isinstance(dst, Float8Tensor):
            raise ValueError("Float8CurrentScalingQuantizer can only update Float8Tensor")
        src = _as_input(src, dst)
        if src.numel() == 0:
            return dst
        x = src.float()
        amax = _abs_ignoring_nan(x).amax().reshape(1)
        if self.with_amax_reduction:
            torch.distributed.all_reduce(amax, op=torch.distributed.ReduceOp.MAX, group=self.amax_reduction_group)
        fp8 = _torch_fp8(self.dtype)
        scale = _scale_from_amax(amax, _FP8_MAX[fp8], self.force_pow_2_scales, self.amax_epsilon, _FLT_MAX)
        _store(self.amax, amax.reshape(self.amax.shape), noop_flag)
        _store(self.scale, scale.reshape(self.scale.shape), noop_flag)
        self._write(x, scale, dst, noop_flag)
        return dst


class Float8Tensor(QuantizedTensor):
    """Per-tensor scaled FP8 (TE ``Float8Tensor``): ``_data``, ``_scale_inv``, ``_transpose``."""

    @staticmethod
    def __new__(
        cls,
        *,
        shape,
        dtype,
        data,
        fp8_scale_inv,
        fp8_dtype,
        data_transpose=None,
        quantizer=None,
        requires_grad=False,
        device=None,
    ):
        buf = data if data is not None else data_transpose
        device = buf.device if buf is not None else (device or fp8_scale_inv.device)
        self = QuantizedTensor.__new__(cls, shape, dtype, device=device, requires_grad=requires_grad)
        self._data = data
        self._scale_inv = fp8_scale_inv
        self._fp8_dtype = fp8_dtype
        self._transpose = data_transpose
        self._transpose_invalid = data_transpose is None
        self._quantizer = quantizer.copy() if quantizer is not None else None
        return self

    def get_metadata(self) -> Dict[str, Any]:
        return {
            "data": self._data,
            "fp8_scale_inv": self._scale_inv,
            "fp8_dtype": self._fp8_dtype,
            "data_transpose": None if self._transpose_invalid else self._transpose,
            "quantizer": self._quantizer,
            "device": self.device,
        }

    def _buffers(self):
        meta = self.get_metadata()
        return {k: meta[k] for k in ("data", "fp8_scale_inv", "data_transpose")}

    def dequantize(self, dtype: Optional[torch.dtype] = None) -> torch.Tensor:
        """fp8 -> fp32, times scale_inv, cast (TE ``tex.dequantize``)."""
        dtype = self.dtype if dtype is None else dtype
        fp8 = _torch_fp8(self._fp8_dtype)
        s = self._scale_inv.reshape(())
        if self._data is not None:
            return (self._data.view(fp8).float() * s).to(dtype)
        if self._transpose is None or self._transpose_invalid:
            raise RuntimeError("Float8Tensor has no data")
        m, k = _flat_2d(self.shape)
        out = self._transpose.reshape(k, m).view(fp8).float() * s
        return out.to(dtype).t().reshape(self.shape)

    def _create_transpose(self) -> None:
        m, k = _flat_2d(self.shape)
        if self._transpose is None:
            self._transpose = torch.empty(_columnwise_shape(self.shape), dtype=torch.uint8, device=self.device)
        self._transpose.view(k, m).copy_(self._data.reshape(m, k).t())
        self._transpose_invalid = False

    def update_usage(self, rowwise_usage: Optional[bool] = None, columnwise_usage: Optional[bool] = None):
        """Create the transpose from ``_data`` or drop a layout (TE float8 storage)."""
        has_data = self._data is not None
        has_t = self._transpose is not None and not self._transpose_invalid
        need_data = has_data if rowwise_usage is None else rowwise_usage
        need_t = has_t if columnwise_usage is None else columnwise_usage
        if need_data and not has_data:
            raise RuntimeError("Cannot generate FP8 data, even from FP8 data transpose")
        if need_t and not has_t:
            if not has_data:
                raise RuntimeError("FP8 data is required to generate FP8 data transpose")
            self._create_transpose()
        if not need_data:
            self._data = None
        if not need_t:
            self._transpose = None
            self._transpose_invalid = True

    def _view_shape(self, shape):
        data = self._data.view(shape) if self._data is not None else None
        transpose = None
        if not self._transpose_invalid and self._transpose is not None and shape and shape[-1] == self.shape[-1]:
            transpose = self._transpose.view((shape[-1],) + tuple(shape[:-1]))
        if data is None and transpose is None:
            raise NotImplementedError("view of transpose-only Float8Tensor must keep the last dim")
        return Float8Tensor(
            shape=shape,
            dtype=self.dtype,
            data=data,
            fp8_scale_inv=self._scale_inv,
            fp8_dtype=self._fp8_dtype,
            data_transpose=transpose,
            quantizer=self._quantizer,
        )


# --------------------------------------------------------------------------- MXFP8


class MXFP8Quantizer(Quantizer):
    """MXFP8: 1x32 (rowwise) / 32x1 (columnwise) blocks with E8M0 scales.

    Mirrors ``mxfp8_tensor.py`` and the MXFP8 cast kernel: biased exponent =
    ``float_to_e8m0(amax * (1 / fp8_max))``, data = fp8(x * ``exp2f_rcp(e)``).
    Both dims must be divisible by 32 (TE checks this too).
    """

    def __init__(self, fp8_dtype, *, rowwise: bool = True, columnwise: bool = True) -> None:
        super().__init__(rowwise=rowwise, columnwise=columnwise)
        _torch_fp8(fp8_dtype)
        self.dtype = fp8_dtype

    @staticmethod
    def _check_shape(shape: Sequence[int]) -> Tuple[int, int]:
        m, k = _flat_2d(shape)
        if len(tuple(shape)) < 1 or k % _MXFP8_BLOCK or m % _MXFP8_BLOCK:
            raise ValueError(
                f"MXFP8 requires tensor dims divisible by block {_MXFP8_BLOCK} "
                f"(got shape={tuple(shape)}, flattened to ({m}, {k}))"
            )
        return m, k

    def get_scale_shape(self, shape: Sequence[int], columnwise: bool) -> Tuple[int, int]:
        """(roundup(M,128), roundup4(K/32)) rowwise; (roundup4(M/32), roundup(K,128)) columnwise."""
        m, k = self._check_shape(shape)
        if columnwise:
            return _round_up(m // _MXFP8_BLOCK, 4), _round_up(k, 128)
        return _round_up(m, 128), _round_up(k // _MXFP8_BLOCK, 4)

    def is_quantizable(self, inp: torch.Tensor) -> bool:
        shape = tuple(inp.shape)
        return len(shape) >= 2 and shape[-1] % _MXFP8_BLOCK == 0 and math.prod(shape[:-1]) % _MXFP8_BLOCK == 0

    def _alloc(self, shape, columnwise: bool, device):
        data = torch.empty(tuple(shape), dtype=torch.uint8, device=device)  # never transposed
        return data, torch.empty(self.get_scale_shape(shape, columnwise), dtype=torch.uint8, device=device)

    def make_empty(self, shape, *, dtype=torch.float32, device=None, requires_grad=False):
        device = torch.device("cuda") if device is None else device
        shape = tuple(shape)
        self._check_shape(shape)
        row = self._alloc(shape, False, device) if self.rowwise_usage else (None, None)
        col = self._alloc(shape, True, device) if self.columnwise_usage else (None, None)
        return MXFP8Tensor(
            shape=shape,
            dtype=dtype,
            rowwise_data=row[0],
            rowwise_scale_inv=row[1],
            columnwise_data=col[0],
            columnwise_scale_inv=col[1],
            fp8_dtype=self.dtype,
            quantizer=self,
            requires_grad=requires_grad,
        )

    def update_quantized(self, src, dst, *, noop_flag=None):
        if not isinstance(dst, MXFP8Tensor):
            raise TypeError(f"Cannot store quantized MXFP8 in {type(dst)} type.")
        src = _as_input(src, dst)
        m, k = self._check_shape(dst.shape)
        for usage, name in ((self.rowwise_usage, "_rowwise"), (self.columnwise_usage, "_columnwise")):
            if usage and getattr(dst, name + "_data") is None:
                data, sinv = self._alloc(dst.shape, name == "_columnwise", dst.device)
                setattr(dst, name + "_data", data)
                setattr(dst, name + "_scale_inv", sinv)
            elif not usage:
                setattr(dst, name + "_data", None)
                setattr(dst, name + "_scale_inv", None)
        if src.numel() == 0:
            return dst
        fp8 = _torch_fp8(self.dtype)
        rcp = _FP8_MAX_RCP[fp8]
        x = src.reshape(m, k).float()
        kb, mb = k // _MXFP8_BLOCK, m // _MXFP8_BLOCK
        if dst._rowwise_data is not None:
            xb = x.view(m, kb, _MXFP8_BLOCK)
            e = _float_to_e8m0(_abs_ignoring_nan(xb).amax(dim=2) * rcp)  # (m, kb)
            q = _saturating_cast(xb * _exp2f_rcp(e).unsqueeze(2), fp8)
            _store(dst._rowwise_data.view(m, kb, _MXFP8_BLOCK), q, noop_flag)
            _store(dst._rowwise_scale_inv[:m, :kb], e, noop_flag)
        if dst._columnwise_data is not None:
            xb = x.view(mb, _MXFP8_BLOCK, k)
            e = _float_to_e8m0(_abs_ignoring_nan(xb).amax(dim=1) * rcp)  # (mb, k)
            q = _saturating_cast(xb * _exp2f_rcp(e).unsqueeze(1), fp8)
            _store(dst._columnwise_data.view(mb, _MXFP8_BLOCK, k), q, noop_flag)
            _store(dst._columnwise_scale_inv[:mb, :k], e, noop_flag)
        dst._fp8_dtype = self.dtype
        return dst


class MXFP8Tensor(QuantizedTensor):
    """MXFP8 data (TE ``MXFP8Tensor``); scale_inv buffers are uint8 biased exponents."""

    @staticmethod
    def __new__(
        cls,
        *,
        shape,
        dtype,
        rowwise_data,
        rowwise_scale_inv,
        columnwise_data,
        columnwise_scale_inv,
        fp8_dtype,
        quantizer,
        requires_grad=False,
        device=None,
    ):
        data = rowwise_data if rowwise_data is not None else columnwise_data
        device = data.device if data is not None else (device or torch.device("cuda"))
        self = QuantizedTensor.__new__(cls, shape, dtype, device=device, requires_grad=requires_grad)
        self._rowwise_data = rowwise_data
        self._rowwise_scale_inv = rowwise_scale_inv
        self._columnwise_data = columnwise_data
        self._columnwise_scale_inv = columnwise_scale_inv
        self._fp8_dtype = fp8_dtype
        self._quantizer = quantizer.copy() if quantizer is not None else None
        self._with_gemm_swizzled_scales = False
        return self

    def get_metadata(self) -> Dict[str, Any]:
        return {
            "rowwise_data": self._rowwise_data,
            "rowwise_scale_inv": self._rowwise_scale_inv,
            "columnwise_data": self._columnwise_data,
            "columnwise_scale_inv": self._columnwise_scale_inv,
            "fp8_dtype": self._fp8_dtype,
            "quantizer": self._quantizer,
            "device": self.device,
        }

    def _buffers(self):
        return {k: v for k, v in self.get_metadata().items() if k.endswith(("_data", "_scale_inv"))}

    def dequantize(self, dtype: Optional[torch.dtype] = None) -> torch.Tensor:
        """fp8 -> fp32 times ``exp2f(e)`` per block (TE MXFP8 dequantize kernel)."""
        dtype = self.dtype if dtype is None else dtype
        fp8 = _torch_fp8(self._fp8_dtype)
        m, k = _flat_2d(self.shape)
        kb, mb = k // _MXFP8_BLOCK, m // _MXFP8_BLOCK
        if self._rowwise_data is not None:
            q = self._rowwise_data.reshape(m, kb, _MXFP8_BLOCK).view(fp8).float()
            out = q * _exp2f(self._rowwise_scale_inv[:m, :kb]).unsqueeze(2)
        elif self._columnwise_data is not None:
            q = self._columnwise_data.reshape(mb, _MXFP8_BLOCK, k).view(fp8).float()
            out = q * _exp2f(self._columnwise_scale_inv[:mb, :k]).unsqueeze(1)
        else:
            raise RuntimeError("MXFP8Tensor has no data")
        return out.to(dtype).reshape(self.shape)

    def update_usage(self, rowwise_usage: Optional[bool] = None, columnwise_usage: Optional[bool] = None):
        """Drop a layout; a missing one cannot be rebuilt (scales differ)."""
        if rowwise_usage is None:
            rowwise_usage = self._rowwise_data is not None
        if columnwise_usage is None:
            columnwise_usage = self._columnwise_data is not None
        if rowwise_usage and self._rowwise_data is None:
            raise RuntimeError("Requested row-wise usage, but MXFP8Tensor is missing row-scaled FP8 data")
        if columnwise_usage and self._columnwise_data is None:
            raise RuntimeError("Requested column-wise usage, but MXFP8Tensor is missing column-scaled FP8 data")
        if not rowwise_usage:
            self._rowwise_data = self._rowwise_scale_inv = None
        if not columnwise_usage:
            self._columnwise_data = self._columnwise_scale_inv = None

    def _view_shape(self, shape):
        if len(shape) < 2 or shape[-1] != self.shape[-1]:
            raise ValueError(
                f"Attempted to make view with size={tuple(shape)} from MXFP8 tensor with shape={tuple(self.shape)}."
            )
        meta = self.get_metadata()
        for name in ("rowwise_data", "columnwise_data"):
            if meta[name] is not None:
                meta[name] = meta[name].view(shape)
        return MXFP8Tensor(shape=shape, dtype=self.dtype, **meta)


# --------------------------------------------------------------------------- recipe


def blockwise_fp32_scales_from_env() -> bool:
    """``NVTE_FP8_BLOCK_SCALING_FP32_SCALES=1`` -> FP32 (not power-of-two) block scales."""
    return os.getenv("NVTE_FP8_BLOCK_SCALING_FP32_SCALES", "0") == "1"


class _FormatHelper(NamedTuple):
    max_fwd: float
    max_bwd: float


class Format(enum.Enum):
    """FP8 formats (``common/recipe/__init__.py``)."""

    E4M3 = _FormatHelper(max_fwd=448, max_bwd=448)
    E5M2 = _FormatHelper(max_fwd=57344, max_bwd=57344)
    HYBRID = _FormatHelper(max_fwd=448, max_bwd=57344)


@dataclass(frozen=True)
class QParams:
    """Quantization parameters of one tensor role."""

    power_2_scale: bool = False
    amax_epsilon: float = 0.0


# Read once at import, like TE's class-level ``os.getenv`` default.
_USE_F32_SCALES = blockwise_fp32_scales_from_env()


@dataclass
class Float8BlockScaling:
    """``Float8BlockScaling`` recipe: 1x128 activations/grads, 128x128 weights, E4M3."""

    fp8_format: Format = Format.E4M3
    use_f32_scales: bool = _USE_F32_SCALES
    fp8_quant_fwd_inp: QParams = field(default_factory=lambda: QParams(power_2_scale=not _USE_F32_SCALES))
    fp8_quant_fwd_weight: QParams = field(default_factory=lambda: QParams(power_2_scale=not _USE_F32_SCALES))
    fp8_quant_bwd_grad: QParams = field(default_factory=lambda: QParams(power_2_scale=not _USE_F32_SCALES))
    x_block_scaling_dim: int = 1
    w_block_scaling_dim: int = 2
    grad_block_scaling_dim: int = 1

    def __post_init__(self) -> None:
        dims = (self.x_block_scaling_dim, self.w_block_scaling_dim, self.grad_block_scaling_dim)
        if any(d not in (1, 2) for d in dims):
            raise ValueError(f"block scaling dims must be 1 or 2, got {dims}")
        if sum(d == 2 for d in dims) > 1:
            raise ValueError("2D by 2D block gemm not supported.")
        if self.fp8_format == Format.E5M2:
            raise ValueError("Pure E5M2 training is not supported.")
