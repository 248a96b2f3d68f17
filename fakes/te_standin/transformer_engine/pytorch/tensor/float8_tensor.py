"""Per-tensor FP8 (TE 2.5 ``pytorch/tensor/float8_tensor.py``), from simdist's TE fakes."""
from simdist.fakes.transformer_engine import Float8CurrentScalingQuantizer, Float8Quantizer, Float8Tensor

from ..._missing import module_getattr

__getattr__ = module_getattr(__name__, {"Float8Tensor", "Float8Quantizer", "Float8CurrentScalingQuantizer"})
