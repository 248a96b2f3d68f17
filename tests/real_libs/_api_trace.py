"""Which torch APIs the real libraries call, measured: a profiler hook that records every call made from a library's
own source file into torch.distributed / torch.cuda / c10d's C++ objects (ProcessGroup, Work, Future, streams and
events) / storage and stream tricks on tensors, with the calling file and line. Used to write
docs/dev/real-libs.md (the checklist of what simdist's real c10d backend must support); not part of any test.

    torchrun --standalone --nproc-per-node=N tests/real_libs/_launch.py --trace OUT.json [--serial-cuda] SCRIPT.py

Every rank writes OUT.json.rank<R>: {"caller file:line -> api": count}. Only rank-local Python-visible calls are
seen: what C++ calls C++ (torch DDP's Reducer launching allreduce, autograd running hooks) is not, and neither are
attribute assignments such as `param.data = view` (grep finds those; the doc lists them from the source).
"""

import json
import os
import sys
import threading
from collections import Counter

import torch

LIBRARY_PARTS = (
    os.sep + os.path.join("megatron", "core") + os.sep,
    os.sep + os.path.join("torch", "distributed", "fsdp") + os.sep,
    os.sep + os.path.join("torch", "distributed", "tensor") + os.sep,
    os.sep + os.path.join("torch", "distributed", "device_mesh.py"),
    os.sep + os.path.join("torch", "distributed", "_functional_collectives.py"),
    os.sep + os.path.join("torch", "distributed", "distributed_c10d.py"),
    os.sep + os.path.join("torch", "distributed", "utils.py"),
    os.sep + os.path.join("torch", "distributed", "algorithms") + os.sep,
    os.sep + os.path.join("torch", "nn", "parallel", "distributed.py"),
)
CALLEE_PY_PARTS = (
    os.sep + os.path.join("torch", "distributed", "distributed_c10d.py"),
    os.sep + os.path.join("torch", "distributed", "_functional_collectives.py"),
    os.sep + os.path.join("torch", "distributed", "device_mesh.py"),
    os.sep + os.path.join("torch", "cuda") + os.sep,
    os.sep + "_serial_cuda.py",
)
TRANSPARENT = (os.path.join("torch", "distributed", "c10d_logger.py"), os.path.join("torch", "utils", "_contextlib.py"),
               "typing_extensions.py", os.path.join("torch", "_compile.py"))
C_TYPES = ("ProcessGroup", "Backend", "ProcessGroupGloo", "ProcessGroupNCCL", "Work", "Future", "Stream", "Event",
           "UntypedStorage", "GradBucket", "Reducer", "Store", "TCPStore", "PrefixStore", "Logger")
TENSOR_METHODS = {"record_stream", "untyped_storage", "resize_", "set_", "data_ptr", "_typed_storage",
                  "is_pinned", "pin_memory", "share_memory_", "type"}
SITE_PACKAGES = os.path.dirname(os.path.dirname(torch.__file__))


def _short(path):
    return os.path.relpath(path, SITE_PACKAGES) if path.startswith(SITE_PACKAGES) else os.path.basename(path)


def _is_library(path):
    return any(part in path for part in LIBRARY_PARTS)


PLUMBING = tuple(os.sep + os.path.join("torch", "distributed", f) for f in
                 ("distributed_c10d.py", "c10d_logger.py", "_functional_collectives.py"))


def _dispatch_mode(record):
    """A TorchDispatchMode that sees the c10d dispatcher ops (c10d::allreduce_, _c10d_functional::wait_tensor,
    fsdp::all_gather_copy_in ...) each collective becomes: what a backend at the dispatcher level must handle."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class C10dOps(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = str(func)
            if name.split(".")[0] in ("c10d", "_c10d_functional", "c10d_functional", "fsdp"):
                frame = sys._getframe(1)
                site = None
                while frame is not None:
                    path = frame.f_code.co_filename
                    if _is_library(path) and not path.endswith(PLUMBING):
                        site = frame
                        break
                    frame = frame.f_back
                if site is None:  # issued from C++ (torch DDP's Reducer inside backward): the innermost frame
                    site = sys._getframe(1)
                    while site.f_back is not None and "torch" + os.sep in site.f_code.co_filename:
                        site = site.f_back
                record(site, f"dispatcher op {name}")
            return func(*args, **(kwargs or {}))

    return C10dOps()


class Tracer:
    def __init__(self):
        self.counts = Counter()
        self.mode = _dispatch_mode(self._record)

    def _record(self, caller, api):
        self.counts[f"{_short(caller.f_code.co_filename)}:{caller.f_lineno} -> {api}"] += 1

    def __call__(self, frame, event, arg):
        if event == "call":
            code = frame.f_code
            caller = frame.f_back
            while caller is not None and caller.f_code.co_filename.endswith(TRANSPARENT):
                caller = caller.f_back  # c10d's logging/deprecation decorators: attribute to their caller
            if caller is None or not _is_library(caller.f_code.co_filename):
                return
            if any(part in code.co_filename for part in CALLEE_PY_PARTS):
                if code.co_filename.endswith("_serial_cuda.py"):
                    if code.co_qualname.startswith("_CudaIsTheCpu"):
                        return  # every torch function passes the stand-in's mode: not an API call
                    module = "torch.cuda"  # the serial stand-in answers for it on a CPU machine
                else:
                    module = _short(code.co_filename).replace(os.sep, ".").removesuffix(".py")
                self._record(caller, f"{module}.{code.co_qualname}")
            elif code.co_filename.endswith(os.path.join("torch", "_ops.py")) and code.co_name == "__call__":
                op = frame.f_locals.get("self")
                name = getattr(op, "_qualified_op_name", None) or getattr(op, "__name__", None) or repr(op)
                if any(ns in str(name) for ns in ("c10d", "fsdp")):
                    self._record(caller, f"torch.ops.{name}")
        elif event == "c_call":
            if not _is_library(frame.f_code.co_filename):
                return
            owner = getattr(arg, "__self__", None)
            name = getattr(arg, "__name__", "?")
            if owner is not None and not isinstance(owner, type(sys)):
                tname = type(owner).__name__
                if tname in C_TYPES or tname.endswith("Stream") or tname.endswith("Event"):
                    self._record(frame, f"{tname}.{name}")
                elif isinstance(owner, torch.Tensor) and name in TENSOR_METHODS:
                    self._record(frame, f"Tensor.{name}")
            module = getattr(arg, "__module__", "") or ""
            if module.startswith("torch._C._distributed"):
                # pybind methods (ProcessGroup.allreduce_coalesced, Work.wait, ...) arrive unbound: the C++ name
                self._record(frame, f"c10d C++ .{name}()")
            elif module.startswith("torch.distributed"):
                self._record(frame, f"{module}.{name}")

    def install(self):
        sys.setprofile(self)
        threading.setprofile(self)
        self.mode.__enter__()

    def dump(self, path):
        self.mode.__exit__(None, None, None)
        sys.setprofile(None)
        threading.setprofile(None)
        rank = os.environ.get("RANK", "0")
        with open(f"{path}.rank{rank}", "w") as f:
            json.dump(dict(sorted(self.counts.items())), f, indent=1)
