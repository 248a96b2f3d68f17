"""An import-compatible TransformerEngine stand-in for real Megatron-Bridge on a machine without TE.

Megatron-Bridge 0.3.1 imports ``transformer_engine.pytorch`` at module level (``peft/lora_layers.py`` and
``peft/lora.py``, reached from ``models/conversion/model_bridge.py`` through ``peft_bridge.py``), so its
conversion code cannot be imported without TE; TE itself cannot be built without CUDA. ``install()`` makes
``import transformer_engine`` find the package in ``fakes/te_standin/transformer_engine/`` -- only when
``importlib.util.find_spec("transformer_engine")`` finds no real TE, and only in the process that calls it
(the real stack's rank processes, ``simdist.properties.real_stack``), never at simdist's import.

What the stand-in provides (names measured: what Megatron-Bridge's import chain and its conversion of a
Llama GPTModel touch; ``tests/test_real_stack.py`` checks the list):

* ``transformer_engine.pytorch.Linear`` and ``transformer_engine.pytorch.ops.Sequential``: classes, because
  Bridge subclasses ``te.Linear`` (``class TELinearAdapter(te.Linear)``) and annotates with
  ``te.ops.Sequential`` at import. Creating either raises ``TEStandinError`` naming it: TE's fused modules
  and their GEMM kernels are not modelled, and with no instance ever made, Bridge's
  ``isinstance(m, te.Linear)`` checks answer False, which is true.
* ``transformer_engine.pytorch.tensor`` (``QuantizedTensor``, ``Quantizer``) and its ``float8_tensor``,
  ``float8_blockwise_tensor``, ``mxfp8_tensor`` modules, at TE 2.5's paths: the classes of
  ``fakes/transformer_engine.py`` (Float8Tensor / Float8BlockwiseQTensor / MXFP8Tensor and their quantizers;
  dequantize with torch ops on the current stream, as TE does). No real code on the real stack's path
  imports them (see below); they are where TE keeps them, for code that does.
* Any other name of a stand-in module raises ``TEStandinError`` (an AttributeError) naming the symbol, so
  ``from transformer_engine.pytorch import X`` fails as an ImportError does with a TE lacking X; a missing
  submodule is a ModuleNotFoundError. Nothing returns a stub value.

Keeping Megatron-Core off TE paths. Megatron-Core probes for TE at import in ~100 places (``HAVE_TE``,
``HAVE_TE_FP8_TENSOR_CLASS`` in ``fp8_utils.py``, ``tex`` in ``utils.py``, TE optimizers in
``optimizer/__init__.py``...) and then takes TE code paths (TE linear layers, TE FP8 tensors, fused
optimizers) that a stand-in cannot run. ``install()`` puts a finder first on ``sys.meta_path`` that, while
any ``megatron.core`` module executes its body, hides TE: the stand-in's modules leave ``sys.modules`` for
the duration and ``import transformer_engine`` raises ModuleNotFoundError, exactly as on a machine without
TE. Every ``megatron.core`` flag is therefore the no-TE value, whatever the import order (a module Bridge
imports first still runs hidden), and Megatron-Core's runtime TE imports all sit behind those flags
(``fp8_utils``: ``if HAVE_TE and is_te_min_version(...)``). Megatron-Bridge, which is not Megatron-Core,
sees the stand-in. ``megatron_core_saw_te()`` lists any Megatron-Core module that nonetheless saw it.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
TE_NAMES = ("transformer_engine", "transformer_engine_torch")

__all__ = ["TEStandinError", "install", "installed", "real_te_available", "megatron_core_saw_te"]


class TEStandinError(AttributeError):
    """A TransformerEngine symbol that simdist's TE stand-in does not provide (or cannot run)."""


def real_te_available() -> bool:
    """Whether a real TransformerEngine is importable (the stand-in is then never used)."""
    if installed():
        return _STATE["mode"] == "real"
    try:
        return importlib.util.find_spec("transformer_engine") is not None
    except (ImportError, ValueError):
        return False


_STATE = {"mode": None, "finder": None}
_LOCAL = threading.local()
_SAW = []  # (megatron.core module, TE module) pairs seen despite the guard


def installed() -> bool:
    return _STATE["mode"] is not None


def _hidden() -> int:
    return getattr(_LOCAL, "depth", 0)


class _HidingLoader(importlib.abc.Loader):
    """Runs a megatron.core module's body with TE hidden (see the module docstring)."""

    def __init__(self, inner):
        self.inner = inner

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module):
        stash = {k: sys.modules.pop(k) for k in list(sys.modules) if k.split(".")[0] in TE_NAMES}
        _LOCAL.depth = _hidden() + 1
        try:
            self.inner.exec_module(module)
        finally:
            _LOCAL.depth -= 1
            leaked = [k for k in sys.modules if k.split(".")[0] in TE_NAMES]
            for k in leaked:  # (cannot happen while hidden: find_spec refuses; kept as a check)
                _SAW.append((module.__name__, k))
            sys.modules.update(stash)

    def __getattr__(self, name):  # get_resource_reader, is_package, get_code ... of the wrapped loader
        return getattr(self.inner, name)


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self, serve_standin: bool):
        self.serve_standin = serve_standin

    def find_spec(self, name, path, target=None):
        top = name.split(".")[0]
        if top in TE_NAMES:
            if _hidden():
                raise ModuleNotFoundError(f"No module named {name!r} (TransformerEngine is hidden from "
                                          "Megatron-Core by simdist's TE stand-in guard)", name=name)
            if self.serve_standin and name == "transformer_engine":
                return importlib.machinery.PathFinder.find_spec(name, [HERE])
            return None  # submodules: found through the package's __path__; transformer_engine_torch: none
        if name == "megatron.core" or name.startswith("megatron.core."):
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(name, path, target)
                if spec is None:
                    continue
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _HidingLoader(spec.loader)
                return spec
        return None


def install() -> str:
    """Make ``import transformer_engine`` work for Megatron-Bridge in this process: "real" when a real TE is
    importable (nothing is changed), else "standin". Either way Megatron-Core modules imported from now on
    run with TE hidden only in the stand-in case. Idempotent."""
    if _STATE["mode"] is not None:
        return _STATE["mode"]
    try:
        real = importlib.util.find_spec("transformer_engine") is not None
    except (ImportError, ValueError):
        real = False
    if real:
        _STATE["mode"] = "real"
        return "real"
    finder = _Finder(serve_standin=True)
    sys.meta_path.insert(0, finder)
    _STATE.update(mode="standin", finder=finder)
    return "standin"


def megatron_core_saw_te():
    """(megatron.core module, TE module) pairs where a Megatron-Core module body ran with TE visible: Megatron-
    Core modules imported before install() ran without any TE; those imported after, with TE hidden. Empty
    unless the guard failed."""
    out = list(_SAW)
    if _STATE["mode"] == "standin":
        for name, mod in list(sys.modules.items()):
            if not (name == "megatron.core" or name.startswith("megatron.core.")):
                continue
            te = getattr(mod, "te", None) or getattr(mod, "tex", None)
            if te is not None and getattr(te, "__name__", "").split(".")[0] in TE_NAMES:
                out.append((name, te.__name__))
    return out
