"""Blockwise FP8 (TE 2.5 ``pytorch/tensor/float8_blockwise_tensor.py``), from simdist's TE fakes: 128x128 /
1x128 tiles, dequantize with torch ops on the current stream."""
from simdist.fakes.transformer_engine import Float8BlockQuantizer, Float8BlockwiseQTensor

from ..._missing import module_getattr

__getattr__ = module_getattr(__name__, {"Float8BlockwiseQTensor", "Float8BlockQuantizer"})
