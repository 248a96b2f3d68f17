"""``transformer_engine.pytorch.ops`` of the stand-in: ``Sequential`` only (Megatron-Bridge's
``peft/lora_layers.py`` uses it in a return annotation, evaluated at import); creating one raises."""
import torch

from ..._missing import module_getattr, unsupported_class

Sequential = unsupported_class("transformer_engine.pytorch.ops.Sequential",
                               "TE's fusible operations are not modelled", base=torch.nn.Module)

__getattr__ = module_getattr("transformer_engine.pytorch.ops", {"Sequential"})
