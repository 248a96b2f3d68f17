"""MXFP8 (TE 2.5 ``pytorch/tensor/mxfp8_tensor.py``), from simdist's TE fakes: 1x32 blocks, E8M0 scales."""
from simdist.fakes.transformer_engine import MXFP8Quantizer, MXFP8Tensor

from ..._missing import module_getattr

__getattr__ = module_getattr(__name__, {"MXFP8Tensor", "MXFP8Quantizer"})
