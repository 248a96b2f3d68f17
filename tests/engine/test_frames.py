"""Report sites: which frames of a launch's stack a report shows (simdist/engine/frames.py)."""
import os
import threading

import torch

from simdist.engine import frames


def test_decorator_shims_and_the_standard_library_are_plumbing_libraries_are_not():
    # torch 2.13 wraps dist.all_gather_into_tensor in typing_extensions' @deprecated wrapper: its frame is no
    # program's, and its line number moves with the shim's version (a report site, so a digest, would too)
    site = os.path.join(os.path.dirname(os.path.dirname(torch.__file__)), "typing_extensions.py")
    assert frames._is_plumbing(site)
    assert frames._is_plumbing(threading.__file__)
    assert frames._is_plumbing(os.path.join(os.path.dirname(torch.__file__), "nn", "modules", "module.py"))
    # torch's own libraries that order device work stay visible: a missing edge can be in their code
    assert not frames._is_plumbing(os.path.join(os.path.dirname(torch.__file__), "nn", "parallel", "distributed.py"))
    assert not frames._is_plumbing(os.path.join(os.path.dirname(os.path.dirname(torch.__file__)), "megatron",
                                                "core", "parallel_state.py"))
    assert not frames._is_plumbing("/home/user/train.py")
