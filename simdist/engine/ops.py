"""Device work in virtual time: ops and the host clock.

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

from .clocks import full_clock, join

LAUNCH_NS = 5_000


class Op:
    """One unit of device work (kernel, copy, collective side, or marker)."""

    __slots__ = ("stream", "seq", "name", "launch", "dur", "start", "end", "start_lb", "deps_left",
                 "waiters", "vc", "fn", "done", "frames", "kind", "watches", "coll", "vc_full")

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
        self.vc_full = None

    def full(self):
        """This op with its full clock (everything ordered before its completion) computed."""
        if self.vc_full is None:
            self.vc_full = full_clock(self)
        return self

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
        self.vc = join(self.vc, op.vc_full if op.vc_full is not None else full_clock(op))
        self.ver += 1

    def join_clock(self, vc):
        self.vc = join(self.vc, vc)
        self.ver += 1
