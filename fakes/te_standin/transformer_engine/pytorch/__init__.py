"""``transformer_engine.pytorch`` of the stand-in: ``Linear`` (a class Megatron-Bridge subclasses at import;
creating one raises), the ``ops`` and ``tensor`` submodules. Any other name raises TEStandinError."""
import torch

from .._missing import module_getattr, unsupported_class
from . import ops, tensor  # noqa: F401

Linear = unsupported_class("transformer_engine.pytorch.Linear",
                           "TE's fused Linear module runs TE GEMM kernels, which are not modelled",
                           base=torch.nn.Module)

__getattr__ = module_getattr("transformer_engine.pytorch", {"Linear", "ops", "tensor"})
