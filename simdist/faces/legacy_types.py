"""torch.cuda's legacy tensor types (torch.cuda.FloatTensor, LongTensor, ...) on simulated CUDA.

Old code still uses them: `Tensor = torch.cuda.FloatTensor if cuda else torch.FloatTensor`, then `Tensor(n, 1)`,
`Tensor(np_array)`, `isinstance(x, torch.cuda.LongTensor)`, `x.type(torch.cuda.DoubleTensor)`,
`torch.set_default_tensor_type(torch.cuda.FloatTensor)`. A CPU build of torch refuses every one of them ("type
torch.cuda.FloatTensor not available. Torch not compiled with CUDA enabled", "Cannot initialize CUDA without
ATen_cuda library"), and its tensortype objects are immutable, so inside a run torch.cuda's names are replaced
by types that behave as a CUDA build's (torch/csrc/utils/tensor_new.cpp legacy_tensor_generic_ctor_new,
torch/csrc/autograd/python_variable_methods.cpp THPVariable_type, torch/__init__.py set_default_tensor_type).
A name bound before the run (a module imported outside it) keeps the CPU build's type: calling it still fails
as there, though `x.type(T)` and `isinstance` with it work.

The CPU build's own constructors (torch.FloatTensor([s, z]), torch.Tensor(...), as torch's DDP
quantization_pertensor_hook calls them with MinMaxObserver's CUDA 0-d qparams) give a CPU tensor on a GPU, but
cannot read a simulated tensor (host_reads.py says why): inside a run torch's CPU names are types that read the
data's simulated tensors to the host and call torch's own constructor, and torch.Tensor's __new__ does the same.
"""
from __future__ import annotations

import torch

from ..engine.errors import UnsupportedOperation
from .host_reads import host_args

LEGACY = {"FloatTensor": torch.float32, "DoubleTensor": torch.float64, "HalfTensor": torch.float16,
          "BFloat16Tensor": torch.bfloat16, "LongTensor": torch.int64, "IntTensor": torch.int32,
          "ShortTensor": torch.int16, "CharTensor": torch.int8, "ByteTensor": torch.uint8, "BoolTensor": torch.bool}
NAME_OF = {dt: n for n, dt in LEGACY.items()}
_orig_type = torch.Tensor.type
_orig_set_default_tensor_type = torch.set_default_tensor_type


class _CudaTensorType(type):
    """The metaclass of a simulated torch.cuda.<X>Tensor: calling it is the legacy constructor, isinstance asks
    the tensor's type (a CUDA tensor of that dtype), as torch.tensortype does."""

    def __call__(cls, *args, device=None):
        return legacy_new(cls, args, device)

    def __instancecheck__(cls, obj):
        return isinstance(obj, torch.Tensor) and obj.is_cuda and obj.dtype == cls.dtype and not obj.is_sparse

    def __repr__(cls):
        return f"<class 'torch.cuda.{cls.__name__}'>"


def _make(name, dtype):
    return _CudaTensorType(name, (), {"dtype": dtype, "is_cuda": True, "is_sparse": False, "__module__": "torch.cuda"})


TYPES = {n: _make(n, dt) for n, dt in LEGACY.items()}
CPU_ORIG = {n: getattr(torch, n) for n in LEGACY}  # the CPU build's torch.tensortype objects


class _CpuTensorType(type):
    """The metaclass of torch.<X>Tensor during a run: the CPU build's legacy constructor of host data (the data's
    simulated tensors read first); isinstance and everything else are the original tensortype's."""

    def __call__(cls, *args, **kwargs):
        return cls.orig(*host_args(args), **kwargs)

    def __instancecheck__(cls, obj):
        return isinstance(obj, cls.orig)

    def __repr__(cls):
        return repr(cls.orig)


CPU_TYPES = {n: _CpuTensorType(n, (), {"orig": T, "dtype": T.dtype, "is_cuda": False, "is_sparse": False,
                                       "__module__": "torch"}) for n, T in CPU_ORIG.items()}


def _tensor_new(cls, *args, **kwargs):
    # torch.Tensor(data) (and a subclass's super().__new__) is the same legacy constructor (THPVariable_pynew)
    return torch._C.TensorBase.__new__(cls, *host_args(args), **kwargs)


def legacy_new(cls, args, device):
    """torch.cuda.<X>Tensor(...): () empty; (*sizes) or (torch.Size) uninitialized; (sequence or array) its data
    in the type's dtype; (tensor) the tensor itself if it has this type (an alias), else a TypeError."""
    dev = torch.device("cuda") if device is None else torch.device("cuda", device) if isinstance(device, int) \
        else torch.device(device)
    if dev.type != "cuda":
        raise RuntimeError(f"legacy constructor expects device type: cuda but device type: {dev.type} was passed")
    dtype = cls.dtype
    if not args:
        return torch.empty(0, dtype=dtype, device=dev)
    if len(args) == 1 and isinstance(args[0], torch.Size):
        return torch.empty(args[0], dtype=dtype, device=dev)
    if all(isinstance(a, int) and not isinstance(a, bool) for a in args):
        return torch.empty(args, dtype=dtype, device=dev)
    if len(args) == 1:
        a = args[0]
        if isinstance(a, torch.Tensor):
            if a.is_cuda and a.dtype == dtype:
                return a.view(a.shape)
            raise TypeError(f"expected torch.cuda.{cls.__name__} (got {a.type()})")
        if isinstance(a, (torch.UntypedStorage, torch.TypedStorage)):
            raise UnsupportedOperation(f"torch.cuda.{cls.__name__}(storage) (a legacy constructor over a storage) "
                                       "is not modelled by simdist")
        # internal_new_from_data builds it on the host with the type's scalar conversions (a float tensor in a
        # LongTensor's list is refused as there), then copies it to the device
        return CPU_ORIG[cls.__name__](*host_args((a,))).to(dev)
    raise TypeError(f"torch.cuda.{cls.__name__}() received an invalid combination of arguments: "
                    f"{tuple(type(a).__name__ for a in args)}")


def _resolve(t):
    """(is_cuda, dtype) of a legacy type given as a type object (simdist's or torch's) or a 'torch[.cuda].XTensor'
    string; None if it is none of these."""
    if isinstance(t, str):
        for prefix, cuda in (("torch.cuda.", True), ("torch.", False)):
            if t.startswith(prefix) and t[len(prefix):] in LEGACY:
                return cuda, LEGACY[t[len(prefix):]]
        return None
    if isinstance(t, (_CudaTensorType, _CpuTensorType, type(CPU_ORIG["FloatTensor"]))):
        return bool(t.is_cuda), t.dtype
    return None


def tensor_type(self, dtype=None, non_blocking=False, **kwargs):
    """Tensor.type(): the type's name, or the tensor converted to a legacy type (THPVariable_type: a CUDA target
    without an index is the current device; the same type returns the tensor itself)."""
    if "async" in kwargs:
        non_blocking = kwargs.pop("async")
    if dtype is None:
        if self.is_cuda:
            name = NAME_OF.get(self.dtype)
            return f"torch.cuda.{name}" if name else f"torch.cuda.{self.dtype}"
        return _orig_type(self)
    if isinstance(dtype, torch.dtype):
        return self.to(dtype=dtype, non_blocking=non_blocking)
    target = _resolve(dtype)
    if target is None:
        return _orig_type(self, dtype, non_blocking, **kwargs)
    cuda, dt = target
    if cuda:
        device = self.device if self.is_cuda else torch.device("cuda")
    else:
        device = torch.device("cpu")
    return self.to(device=device, dtype=dt, non_blocking=non_blocking)


def set_default_tensor_type(t):
    """torch.set_default_tensor_type(torch.cuda.FloatTensor): new tensors are CUDA tensors of that (floating)
    type; a CPU type puts the default device back."""
    target = _resolve(t)
    if target is None or not target[0]:
        if target is not None:
            torch.set_default_device(None)
        return _orig_set_default_tensor_type(t.orig if isinstance(t, _CpuTensorType) else t)
    _, dt = target
    if not dt.is_floating_point:
        raise TypeError("only floating-point types are supported as the default type")
    torch.set_default_dtype(dt)
    torch.set_default_device("cuda")


def legacy_type_patches():
    from .tensor import SimTensor
    return [(torch.cuda, n, T) for n, T in TYPES.items()] + [(torch, n, T) for n, T in CPU_TYPES.items()] + [
        (torch.Tensor, "__new__", staticmethod(_tensor_new)),
        (torch.Tensor, "type", tensor_type), (SimTensor, "type", tensor_type),
        (torch, "set_default_tensor_type", set_default_tensor_type)]
