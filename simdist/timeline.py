"""Device work in virtual time: ops, streams and the host clock.

Timing rules (DESIGN.md "Engine semantics" 2):
- a launch costs the host LAUNCH_NS of virtual time;
- an op starts at max(end of its stream predecessor, the events it waits on,
  its launch time) and ends after its duration (cost model x policy);
- a kernel runs atomically at its end time: it reads and writes memory as it
  stands then (zero-copy, so big tensors cost what eager torch costs);
  a collective reads its inputs once every rank has started it and writes at its end;
- an op whose start depends on a collective other ranks have not joined yet
  has no time until they do; it waits in its predecessor's `waiters` list.
"""
from __future__ import annotations

import sys

LAUNCH_NS = 5_000


class Op:
    """One unit of device work (kernel, copy, collective side, or marker)."""

    __slots__ = ("stream", "seq", "name", "launch", "dur", "start", "end", "start_lb", "deps_left",
                 "waiters", "vc", "fn", "done", "frames", "kind", "watches", "coll", "index", "vc_full",
                 "base_cost")

    def __init__(self, stream, name, kind, launch, fn=None):
        self.stream = stream
        self.name = name
        self.kind = kind  # "kernel", "copy", "d2h", "h2d", "collective", "marker", "sleep"
        self.launch = launch
        self.fn = fn
        self.seq = 0
        self.dur = 0
        self.start = None
        self.end = None
        self.start_lb = launch
        self.deps_left = 0
        self.waiters = None
        self.vc = None
        self.done = False
        self.frames = None
        self.watches = None
        self.coll = None
        self.index = 0
        self.vc_full = None
        self.base_cost = 0

    def __repr__(self):
        return f"<Op {self.name} {self.stream.name}#{self.seq} [{self.start},{self.end}]>"


class Host:
    """A rank's host thread in virtual time, with its happens-before clock."""

    __slots__ = ("rank", "clock", "vc", "ver")

    def __init__(self, rank):
        self.rank = rank
        self.clock = 0
        self.vc = {}
        self.ver = 0

    def join_op(self, op):
        from .clocks import full_clock, join
        self.vc = join(self.vc, op.vc_full if op.vc_full is not None else full_clock(op))
        self.ver += 1

    def join_clock(self, vc):
        from .clocks import join
        self.vc = join(self.vc, vc)
        self.ver += 1


def capture_frames(depth=10, skip=2):
    """Cheap stack capture: (code, instruction offset) pairs; line numbers are resolved only when reported
    (f_lineno scans the code's line table on every access, f_lasti does not). `skip` frames above this one
    are simdist's own (callers on the hot path know their depth; the report filters any that remain)."""
    try:
        f = sys._getframe(skip)
    except ValueError:
        f = sys._getframe(1)
    out = []  # flat: code, offset, code, offset... (one object per op: the run keeps every op's frames)
    add = out.append
    while f is not None and depth:
        add(f.f_code)
        add(f.f_lasti)
        f = f.f_back
        depth -= 1
    return out


def _line(code, lasti):
    for start, end, line in code.co_lines():
        if start <= lasti < end:
            return line if line is not None else code.co_firstlineno
    return code.co_firstlineno


_SKIP_PREFIXES = None


def _skip_prefixes():
    global _SKIP_PREFIXES
    if _SKIP_PREFIXES is None:
        import os
        import threading
        import torch
        import simdist
        _SKIP_PREFIXES = (os.path.dirname(simdist.__file__) + os.sep,
                          os.path.dirname(torch.__file__) + os.sep,
                          os.path.dirname(threading.__file__) + os.sep + "threading.py")
    return _SKIP_PREFIXES


def user_frames(frames, limit=6):
    """The innermost frames that belong to the program under test."""
    skip = _skip_prefixes()
    out = []
    frames = frames or ()
    for i in range(0, len(frames) - 1, 2):
        code, lasti = frames[i], frames[i + 1]
        fn = code.co_filename
        if fn.startswith(skip) or fn.startswith("<frozen"):
            continue
        out.append((fn, _line(code, lasti), code.co_name))
        if len(out) >= limit:
            break
    return out


def format_frames(frames, indent="    "):
    uf = user_frames(frames)
    if not uf:
        return indent + "(no user frame)"
    lines = []
    import linecache
    for fn, line, name in uf:
        lines.append(f'{indent}File "{fn}", line {line}, in {name}')
        src = linecache.getline(fn, line).strip()
        if src:
            lines.append(f"{indent}  {src}")
    return "\n".join(lines)
