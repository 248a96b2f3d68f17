"""A rank stuck outside the simulation: a named error instead of a hang.

Only the rank holding the baton runs, and it gives the baton up only where simdist sees it wait (a
synchronize, a collective's wait, a store). A program that waits for something simdist does not simulate (a
multiprocessing queue or pipe another rank would fill, a threading.Event another rank thread would set, a file
another rank would write) therefore waits forever: nobody else can run. On GPUs some of these waits end and some
do not (Megatron-Core's checkpoint writer waiting on a worker that died hangs there too, notes w8); under simdist
none can end, so the run must not hang silently.

A watch samples the rank's thread: stalled when, for `limit` seconds of wall time, the rank launched no kernel,
its host clock stood still and no sample found the thread inside simdist's machinery above the program (a long
kernel runs inside the engine's drain: never a stall). The error names the rank, the call it is blocked in and
its stack. `SIMDIST_STALL_TIMEOUT` sets the limit in seconds (0: never).
"""
from __future__ import annotations

import os
import sys
import time
import traceback
from typing import Optional

from ..engine.errors import SimulationError, Stalled

ENV = "SIMDIST_STALL_TIMEOUT"
DEFAULT_S = 60.0
INTERVAL_S = 0.25
_PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_MACHINERY = tuple(os.path.join(_PKG, d) + os.sep for d in ("engine", "faces", "ranks"))
_MACHINERY += (os.path.join(_PKG, "session.py"), os.path.join(_PKG, "launcher.py"))


def limit_s() -> Optional[float]:
    """The stall limit in seconds from SIMDIST_STALL_TIMEOUT (default 60), or None for never."""
    raw = os.environ.get(ENV, "").strip()
    if not raw:
        return DEFAULT_S
    try:
        v = float(raw)
    except ValueError:
        raise SimulationError(f"{ENV}={raw!r}: expected a number of seconds (0 turns the stall check off)") from None
    return v if v > 0 else None


def _in_machinery(frame, base) -> bool:
    """Whether a frame of simdist's machinery sits above the program's entry frame `base` (the thread is in a
    kernel, a dispatch or a simulated wait), or the program has not started / has returned (no `base` above)."""
    f = frame
    while f is not None:
        if f is base:
            return False
        if f.f_code.co_filename.startswith(_MACHINERY):
            return True
        f = f.f_back
    return True  # the entry frame is not on the stack: the program is not running on this thread


class StallWatch:
    """Watches one rank's program thread (see the module docstring); `check()` once per sample."""

    def __init__(self, rank, thread_ident: int, limit: float):
        self.rank = rank
        self.ident = thread_ident
        self.limit = limit
        self.since = time.monotonic()
        self.mark = None

    def check(self) -> Optional[Stalled]:
        """The Stalled error once the rank has been stuck for the limit, else None."""
        now = time.monotonic()
        rank = self.rank
        base = rank.stack_base[0] if rank.stack_base else None
        frame = sys._current_frames().get(self.ident)
        mark = (rank.launches, rank.host.clock, rank.state)
        if frame is None or base is None or mark != self.mark or _in_machinery(frame, base):
            self.mark = mark
            self.since = now
            return None
        if now - self.since < self.limit:
            return None
        above = []  # the program's frames, innermost first (those of the transport and simdist.run below it left out)
        f = frame
        while f is not None and f is not base:
            above.append((f, f.f_lineno))
            f = f.f_back
        stack = traceback.StackSummary.extract(reversed(above)).format()
        top = traceback.StackSummary.extract(above[:1])[0]
        return Stalled(
            f"rank {rank.rank} has been outside the simulation for {now - self.since:.0f} s of wall time, blocked in "
            f"{top.name} ({top.filename}:{top.lineno}): it launched nothing and waits for nothing simdist simulates, "
            "so no other simulated rank can run and the run would never end. If it waits for something another "
            "rank provides (a multiprocessing queue or pipe, a threading primitive, a file), that wait cannot end "
            "under simdist (ranks take turns): use a torch.distributed collective, barrier or store instead. If it "
            f"is slow work outside the run, set {ENV}=<seconds> (0: never). Its stack (most recent call last):\n" + "".join(stack).rstrip())
