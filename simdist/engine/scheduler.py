"""Virtual time: the queue of device work, in end-time order.

An op gets its start time once every op it depends on (its stream predecessor, the markers it waits on) has
an end time; it is then pushed at its end time, when its kernel runs on the device bytes. Draining the queue
up to a frontier applies everything no future launch can precede. A collective side has no end time until
every participant has started (simdist/engine/collectives.py), so work behind it waits in `waiters`.
"""
from __future__ import annotations

import heapq

INF = float("inf")


class EventQueue:
    """Ops (and collective events) keyed by the virtual time they are due; World.drain runs them."""

    def __init__(self):
        self.heap = []
        self.tie = 0
        self.now = 0  # everything with time <= now has been applied to memory

    def schedule(self, op, deps):
        """Give `op` a start time once its dependencies have one."""
        t = op.launch
        pending = 0
        for d in deps:
            if d is None:
                continue
            e = d.end
            if e is None:
                if d.waiters is None:
                    d.waiters = [op]
                else:
                    d.waiters.append(op)
                pending += 1
            elif e > t:
                t = e
        op.start_lb = t
        op.deps_left = pending
        if not pending:
            self.start_all([op])

    def start_all(self, work):
        """Give each op its start (and end) time, then release what waited on it, transitively."""
        while work:
            o = work.pop()
            o.start = o.start_lb
            if o.coll is not None:
                o.coll.participant_started(o)
                continue
            o.end = o.start + o.dur
            if o.fn is not None or o.watches is not None:
                self.push(o.end, o)
            else:
                o.done = True
            if o.waiters:
                self._release(o, work)

    @staticmethod
    def _release(op, work):
        ws, op.waiters = op.waiters, None
        for w in ws:
            if op.end > w.start_lb:
                w.start_lb = op.end
            w.deps_left -= 1
            if not w.deps_left:
                work.append(w)

    def resolved(self, op):
        """A collective side got its end time: release what waits on it."""
        if op.waiters:
            work = []
            self._release(op, work)
            self.start_all(work)

    def push(self, t, item):
        if t < self.now:
            from .errors import SimulationError
            raise SimulationError(f"internal: event at {t} before the processed frontier {self.now}")
        self.tie += 1
        heapq.heappush(self.heap, (t, self.tie, item))

    def push_kernel(self, op):
        """The fast path of schedule() for a kernel whose stream predecessor already has a time."""
        self.tie += 1
        heapq.heappush(self.heap, (op.end, self.tie, op))
