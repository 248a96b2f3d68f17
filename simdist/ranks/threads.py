"""The thread transport: every simulated rank is a host thread of this process, and only one runs at a time.

Turns follow simdist/engine/turns.py: a rank's thread runs its program until it must wait for another rank; the
thread holding the baton then plays the other ranks' turns (their messages, their device work) itself, and wakes
a rank's thread only when that rank's wait is over. Module globals are shared by the rank threads: code that
keeps per-process state in modules needs one process per rank (simdist/ranks/processes.py).
"""
from __future__ import annotations

import threading

from ..engine.context import set_current_rank
from ..engine.errors import _Abort
from ..engine.rank import BLOCKED, DONE, NEW, RUNNING
from ..engine.turns import Baton, begin_turn, can_resume, end_turn
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
        n = world.world_size
        self.ranks = [world.ranks[r] for r in range(n)]
        self.slots = [_Slot() for _ in range(n)]
        self.mail = [[] for _ in range(n)]
        self.baton = Baton(n)
        self.finished = threading.Event()
        self.aborting = False
        self.fn = None
        world.transport = self

    # --- the interface -----------------------------------------------------
    def post(self, dst, msg):
        self.mail[dst].append(msg)

    def run(self, fn):
        """Run fn(rank) on every rank; returns when all are done or the run failed (world.fatal)."""
        self.fn = fn
        try:
            self._wake(0)
            self.finished.wait()
            if self.world.fatal is not None:
                self._abort_all()
        finally:
            for slot in self.slots:
                if slot.thread is not None:
                    slot.thread.join(timeout=60)

    def wait(self, me):
        """The running rank waits: play the other ranks' turns until its own wait is over."""
        self.hooks.suspend(me)
        nxt = self._pass(me.rank, True)
        if nxt != me.rank:
            if nxt is not None:
                self._wake(nxt)
            self.slots[me.rank].sem.acquire()
        if self.aborting:
            raise _Abort()
        self.hooks.resume(me)
        me.state = RUNNING

    # --- turns ----------------------------------------------------------------
    def _take_mail(self, k):
        m, self.mail[k] = self.mail[k], []
        return m

    def _pass(self, current, progressed):
        """Play turns from `current`'s end until one rank must run in its own thread (a new rank, or a waiting
        rank whose wait is over); returns it, or None when the run is over (then `finished` is set)."""
        world, baton = self.world, self.baton
        try:
            while True:
                nxt = end_turn(self.ranks[current], baton, progressed)
                if nxt is None:
                    if baton.outcome == "deadlock" and world.fatal is None:
                        world.fatal = world.deadlock([r.describe_wait() for r in self.ranks],
                                                     [l for r in self.ranks for l in r.collectives.pending_lines()])
                    self.finished.set()
                    return None
                rs = self.ranks[nxt]
                if rs.state == NEW:
                    return nxt
                progressed = begin_turn(rs, baton, self._take_mail(nxt))
                if can_resume(rs):
                    return nxt
                current = nxt
        except BaseException as e:  # an op failed while device work ran, or a mismatch: end the run with it
            if world.fatal is None:
                world.fatal = e
            self.finished.set()
            return None

    def _wake(self, k):
        rs = self.ranks[k]
        slot = self.slots[k]
        if rs.state == NEW:
            rs.state = RUNNING
            slot.thread = threading.Thread(target=self._main, args=(rs,), name=f"simdist-rank{k}", daemon=True)
            slot.thread.start()
        slot.sem.release()

    def _main(self, rs):
        world = self.world
        self.slots[rs.rank].sem.acquire()
        set_current_rank(rs)
        try:
            if self.aborting:
                raise _Abort()
            begin_turn(rs, self.baton, self._take_mail(rs.rank))
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
                nxt = self._pass(rs.rank, True)
                if nxt is not None:
                    self._wake(nxt)

    def _abort_all(self):
        self.aborting = True
        for rs, slot in zip(self.ranks, self.slots):
            if rs.state in (BLOCKED, RUNNING) and slot.thread is not None:
                self.finished.clear()
                slot.sem.release()
                slot.thread.join(timeout=30)
        for slot in self.slots:
            if slot.thread is not None:
                slot.thread.join(timeout=30)
