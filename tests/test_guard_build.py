"""Loading simdist's fake CUDA guard library (simdist/faces/guard.py; notes L9): a library already in torch's
extensions cache is loaded without ninja, and a build lock left by a killed build does not make the import wait
forever (torch's FileBaton polls without a timeout)."""
import os
import time

import pytest
from torch.utils import cpp_extension

from simdist.faces import guard

pytestmark = pytest.mark.skipif(not guard.load(warn=False), reason=guard.reason() or "no fake CUDA guard")


def test_a_built_library_is_loaded_without_building(monkeypatch):
    def no_build(*a, **k):
        raise AssertionError("cpp_extension.load called for a library already built")
    monkeypatch.setattr(cpp_extension, "load", no_build)
    path = guard._built_library()
    assert os.path.exists(path) and os.path.basename(path) == guard._name() + ".so"


def test_a_stale_build_lock_is_removed_before_building(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    build = cpp_extension._get_build_directory(guard._name(), verbose=False)
    lock = os.path.join(build, "lock")
    open(lock, "w").close()
    old = time.time() - 2 * guard._STALE_LOCK_S
    os.utime(lock, (old, old))
    seen = {}
    monkeypatch.setattr(cpp_extension, "load", lambda *a, **k: seen.setdefault("lock_then", os.path.exists(lock)))
    guard._built_library()
    assert seen == {"lock_then": False}


def test_a_fresh_build_lock_is_left_to_its_builder(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    build = cpp_extension._get_build_directory(guard._name(), verbose=False)
    lock = os.path.join(build, "lock")
    open(lock, "w").close()
    monkeypatch.setattr(cpp_extension, "load", lambda *a, **k: "built")
    assert guard._built_library() == "built"
    assert os.path.exists(lock)
