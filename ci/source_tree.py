"""Import simdist's folders from a source checkout that was never pip-installed (the GPU machine has no network).

`pip install` maps fakes/, properties/ and benchmarks/ under simdist's namespace (pyproject.toml's package-dir);
a bare checkout has no such mapping, so the CI scripts that run there call `use_source_tree()` first.
"""
from __future__ import annotations

import importlib.util
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAPPED = ("fakes", "properties", "benchmarks")


def use_source_tree():
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    import simdist
    for sub in MAPPED:
        name = f"simdist.{sub}"
        if name in sys.modules:
            continue
        try:
            if importlib.util.find_spec(name) is not None:
                continue
        except ImportError:
            pass
        path = os.path.join(ROOT, sub)
        spec = importlib.util.spec_from_file_location(name, os.path.join(path, "__init__.py"),
                                                      submodule_search_locations=[path])
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
        setattr(simdist, sub, mod)
