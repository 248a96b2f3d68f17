"""The program corpus format: plain torchrun scripts whose docstrings state their expected verdict.

Docstring fields, one per line:
    EXPECTED: clean | hazard | error | clean-or-error
    KINDS: hazard kinds that must all be reported       KINDS_ALSO: kinds that may also be reported
    ERROR: exception class name(s), '|'-separated       WORLD_SIZE: n (default 2)
    NCCL: 2.7 | 2.8                                      DEVICE_COUNT: devices per world (simdist.run device_count)
    TRANSPORT: threads | processes (default: run_script's, processes; threads for a program about rank threads)
Used by tests/test_programs.py, tests/corpus/run_all.py and ci/gpu_programs.py, on folders they name (the
project's own corpus is tests/corpus/<topic>/; a user's folder works the same).
"""
from __future__ import annotations

import glob
import os
import re


def corpus_paths(*folders):
    """Every program under the given folders (recursively), in name order: a program is a .py file whose
    docstring has an EXPECTED: line."""
    paths = []
    for folder in folders:
        for path in glob.glob(os.path.join(folder, "**", "*.py"), recursive=True):
            with open(path) as f:
                head = f.read(4096)
            if re.search(r"^EXPECTED:", head, re.M):
                paths.append(path)
    return sorted(set(paths), key=os.path.basename)


def parse(path):
    """The docstring fields of one program (see the module docstring)."""
    m = re.search(r'"""(.*?)"""', open(path).read(), re.S)
    doc = m.group(1) if m else ""

    def field(name, default=None):
        mm = re.search(rf"^{name}:\s*(.+)$", doc, re.M)
        return mm.group(1).strip() if mm else default

    def listed(name, sep=","):
        return sorted(k.strip() for k in field(name, "").split(sep) if k.strip())
    dc = field("DEVICE_COUNT")
    return {"name": os.path.basename(path)[:-3], "path": path, "expected": field("EXPECTED", "clean"),
            "kinds": listed("KINDS"), "kinds_also": listed("KINDS_ALSO"), "errors": listed("ERROR", "|"),
            "world_size": int(field("WORLD_SIZE", "2")), "nccl": field("NCCL"),
            "device_count": int(dc) if dc else None, "transport": field("TRANSPORT")}


def run_options(meta):
    """Keyword arguments for simdist.run_script besides world_size and seed."""
    return {k: v for k, v in (("nccl", meta["nccl"]), ("device_count", meta["device_count"]),
                              ("transport", meta.get("transport"))) if v}
