"""simdist's TransformerEngine stand-in (fakes/te_standin/__init__.py says what it provides and why). Not TE:
no ``__version__``, no kernels; ``transformer_engine.pytorch`` holds what Megatron-Bridge 0.3.1 imports."""
from . import pytorch  # noqa: F401  (TE's package imports its framework module too)
from ._missing import module_getattr

__getattr__ = module_getattr("transformer_engine", {"pytorch"})
