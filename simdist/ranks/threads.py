"""The thread transport: every simulated rank is a host thread of this process, and only one runs at a time.

A rank runs until it must wait (a host sync, a host-side rendezvous) or finishes; then World.pick_next chooses
the next one by virtual time alone. So a run is a pure function of (program, world size, seed, policy)
whatever the OS does with threads (DESIGN.md 6, 8). Module globals are shared by the rank threads: code that
keeps per-process state in modules needs one process per rank.
"""
from __future__ import annotations

import threading

from ..engine.context import set_current_rank
from ..engine.errors import _Abort
from ..engine.rank import BLOCKED, DONE, NEW, RUNNING
from . import RankHooks


class _Slot:
    """The thread running one rank and the semaphore it parks on."""

    __slots__ = ("thread", "sem")

    def __init__(self):
        self.thread = None
        self.sem = threading.Semaphore(0)


class ThreadTransport:
    def __init__(self, world, hooks=None):
        self.world = world
        self.hooks = hooks or RankHooks()
        self.slots = {rs.rank: _Slot() for rs in world.ranks}
        self.finished = threading.Event()
        self.aborting = False
        self.fn = None
        world.transport = self

    # --- the interface -----------------------------------------------------
    def run(self, fn):
        """Run fn(rank) on every rank; returns when all are done or the run failed (world.fatal)."""
        self.fn = fn
        try:
            nxt = self._pick_next()
            if nxt is not None:
                self._resume(nxt)
                self.finished.wait()
            if self.world.fatal is not None:
                self._abort_all()
        finally:
            for slot in self.slots.values():
                if slot.thread is not None:
                    slot.thread.join(timeout=60)

    def wait(self, me):
        """The running rank waits: hand over to the next one and park until resumed."""
        self.hooks.suspend(me)
        self._hand_over()
        if me.state == DONE:
            return
        self.slots[me.rank].sem.acquire()
        if self.aborting:
            raise _Abort()
        self.hooks.resume(me)
        me.state = RUNNING
        t = me.wait_cond() if me.wait_cond is not None else None
        if t is not None and t > me.host.clock:
            me.host.clock = t

    # --- scheduling ----------------------------------------------------------
    def _hand_over(self):
        nxt = self._pick_next()
        if nxt is None:
            self.finished.set()
        else:
            self._resume(nxt)

    def _pick_next(self):
        world = self.world
        if world.fatal is not None:
            return None
        try:
            return world.pick_next()
        except BaseException as e:  # a deadlock, or an op that failed while the queue drained: end the run
            if world.fatal is None:
                world.fatal = e
            return None

    def _resume(self, rs):
        slot = self.slots[rs.rank]
        if rs.state == NEW:
            rs.state = RUNNING
            slot.thread = threading.Thread(target=self._main, args=(rs,), name=f"simdist-rank{rs.rank}",
                                           daemon=True)
            slot.thread.start()
        slot.sem.release()

    def _main(self, rs):
        world = self.world
        self.slots[rs.rank].sem.acquire()
        set_current_rank(rs)
        try:
            if self.aborting:
                raise _Abort()
            self.hooks.enter(rs)
            try:
                rs.returned = self.fn(rs.rank)
            finally:
                self.hooks.leave(rs)
        except _Abort:
            pass
        except BaseException as e:  # noqa: BLE001 - re-raised by the runner naming the rank
            rs.error = e
            if world.fatal is None:
                world.fatal = e
        finally:
            set_current_rank(None)
            rs.state = DONE
            if self.aborting or world.fatal is not None:
                self.finished.set()
            else:
                self._hand_over()

    def _abort_all(self):
        self.aborting = True
        for rs in self.world.ranks:
            slot = self.slots[rs.rank]
            if rs.state in (BLOCKED, RUNNING) and slot.thread is not None:
                self.finished.clear()
                slot.sem.release()
                slot.thread.join(timeout=30)
        for slot in self.slots.values():
            if slot.thread is not None:
                slot.thread.join(timeout=30)
