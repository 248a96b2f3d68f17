"""``transformer_engine.pytorch.tensor`` of the stand-in: TE 2.5's quantized tensor base classes, from
simdist's TE fakes (fakes/transformer_engine.py)."""
from simdist.fakes.transformer_engine import QuantizedTensor, Quantizer

from ..._missing import module_getattr
from . import float8_blockwise_tensor, float8_tensor, mxfp8_tensor  # noqa: F401

__getattr__ = module_getattr("transformer_engine.pytorch.tensor",
                             {"QuantizedTensor", "Quantizer", "float8_tensor", "float8_blockwise_tensor",
                              "mxfp8_tensor"})
