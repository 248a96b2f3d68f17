"""The thread transport: every simulated rank is a host thread of this process, and only one runs at a time.

Turns follow simdist/engine/turns.py: the rank holding the baton reads its messages, runs its device work and,
if its wait is over, its program until it waits again; then it hands the baton to the next rank's thread. Each
rank's turns run on its own thread (its device work too: thread-local torch state such as grad mode must be the
rank's own), and a finished rank's thread keeps taking turns until the run is over, since its device work and
its side of collectives may still be pending. Module globals are shared by the rank threads: code that keeps
per-process state in modules needs one process per rank (simdist/ranks/processes.py).
"""
from __future__ import annotations

import _thread
import os
import threading

from ..engine.context import forget_thread
from ..engine.rank import BLOCKED, DONE, NEW, RUNNING
from ..engine.turns import Baton, end_turn
from . import RankHooks, TurnTaker
from .stall import INTERVAL_S, StallWatch, limit_s


class _Slot:
    """The thread running one rank and the lock it parks on: held while the rank is parked (or not yet woken),
    released to wake it. A raw lock, not a threading.Semaphore: a hand-off is one release and one acquire in C
    (a Semaphore is a Condition over a lock, with a new waiter lock at every wait)."""

    __slots__ = ("thread", "sem")

    def __init__(self):
        self.thread = None
        self.sem = _thread.allocate_lock()
        self.sem.acquire()

    def wake(self):
        try:
            self.sem.release()
        except RuntimeError:  # already woken (the run's end wakes every parked thread, one may be on its way)
            pass


def _no_wakeup_preemption():
    """Put the calling rank thread under Linux's SCHED_BATCH: a thread it wakes does not preempt it. A hand-off is
    `release` of the next rank's lock then `acquire` of its own, which drops the GIL; woken first, the next rank
    preempted the waker while it still held the GIL, and both waited for the scheduler to run the waker again
    (a quarter of a 64-rank run's time, sampled with py-spy --gil). Scheduling only: the run's order is the
    baton's, its results the same."""
    try:
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
    except (AttributeError, OSError):  # (not Linux, or not allowed: hand-offs are slower, nothing else changes)
        pass


class ThreadTransport(TurnTaker):
    def __init__(self, world, hooks=None):
        self.world = world
        self.hooks = hooks or RankHooks()
        n = world.world_size
        self.ranks = [world.ranks[r] for r in range(n)]
        self.slots = [_Slot() for _ in range(n)]
        self.mail = [[] for _ in range(n)]
        self.baton = Baton(n)
        self.finished = threading.Event()
        self.over = False  # the run ended (finished, deadlock or a failure): parked threads leave
        self.fn = None
        world.transport = self

    # --- the interface -----------------------------------------------------
    def run(self, fn):
        """Run fn(rank) on every rank; returns when all are done or the run failed (world.fatal)."""
        self.fn = fn
        stuck = None
        try:
            self._wake(0)
            stuck = self._watch()
        finally:
            self._end_run()
            for k, slot in enumerate(self.slots):
                if slot.thread is None:
                    continue
                if k == stuck:  # a stalled thread stays blocked (a daemon): it runs no rank any more
                    forget_thread(slot.thread.ident)
                else:
                    slot.thread.join(timeout=60)

    def _watch(self):
        """Wait for the run's end, watching the rank threads for a stall (simdist/ranks/stall.py): returns the
        stalled rank, whose error is then the run's, or None."""
        limit = limit_s()
        if limit is None:
            self.finished.wait()
            return None
        watches = {}
        while not self.finished.wait(INTERVAL_S):
            for k, slot in enumerate(self.slots):
                t = slot.thread
                if t is None or t.ident is None:
                    continue
                w = watches.get(k)
                if w is None:
                    w = watches[k] = StallWatch(self.ranks[k], t.ident, limit)
                err = w.check()
                if err is not None and not self.finished.is_set():
                    if self.world.fatal is None:
                        self.world.fatal = err
                    return k
        return None

    def _fail(self, rank, error):
        self._end_run()

    # --- turns ----------------------------------------------------------------
    def _hand_over(self, rank, progressed):
        """End rank's turn and pass the baton; returns when rank has it again (True) or the run is over (False)."""
        if self.over:
            return False
        world, baton = self.world, self.baton
        try:
            nxt = end_turn(rank, baton, progressed, self.mail, self.ranks)
        except BaseException as e:  # noqa: BLE001 - a failure while deciding ends the run with it
            if world.fatal is None:
                world.fatal = e
            nxt = None
        if nxt is None:
            if baton.outcome == "deadlock" and world.fatal is None:
                world.fatal = world.deadlock([r.describe_wait() for r in self.ranks],
                                             [line for r in self.ranks for line in r.collectives.pending_lines()])
            self._end_run()
            return False
        if nxt != rank.rank:
            self._wake(nxt)
            self.slots[rank.rank].sem.acquire()
        return not self.over

    def _wake(self, k):
        rank = self.ranks[k]
        slot = self.slots[k]
        if rank.state == NEW:
            rank.state = RUNNING
            slot.thread = threading.Thread(target=self._main, args=(rank,), name=f"simdist-rank{k}", daemon=True)
            slot.thread.start()
        slot.wake()

    def _main(self, rank):
        _no_wakeup_preemption()
        self.slots[rank.rank].sem.acquire()
        if not self.over:
            self._play(rank, self.fn)
        else:
            rank.state = DONE

    def _end_run(self):
        if self.over:
            return
        self.over = True
        self.finished.set()
        for rank, slot in zip(self.ranks, self.slots):
            if rank.state in (BLOCKED, RUNNING, DONE) and slot.thread is not None:
                slot.wake()
