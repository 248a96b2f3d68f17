"""The simulated world: its ranks, their devices and streams, virtual time, the happens-before detector and the
collectives' rendezvous table; which rank may run next, and the deadlock diagnosis when none can.

A run is a pure function of (program, world size, seed, policy) whatever the OS does with threads or processes
(DESIGN.md 6, 8): ranks only wait on conditions of virtual time, and the transport that runs them
(simdist/ranks/) asks `pick_next` which one resumes.
"""
from __future__ import annotations

import contextlib
import hashlib

from . import clocks
from .collectives import CollectiveTable, Group
from .detector import Detector, op_error
from .errors import Deadlock
from .frames import format_frames
from .ops import Op
from .rank import BLOCKED, DONE, NEW, RUNNING, Rank
from .scheduler import INF, EventQueue
from .streams import Stream

class World:
    def __init__(self, world_size, seed, policy, nccl_profile, poison, device_count=None, avoid_record_streams=False,
                 stream_class=Stream, group_class=Group, on_new_device=None, device_work=contextlib.nullcontext):
        self.world_size = world_size
        self.device_count = device_count or world_size
        self.seed = seed
        self.policy = policy
        self.nccl_profile = nccl_profile
        self.avoid_record_streams = avoid_record_streams
        self.poison = poison
        self.stream_class = stream_class  # the torch face's Stream subclass (torch.cuda.Stream's API)
        self.on_new_device = on_new_device or (lambda device: None)
        self.device_work = device_work  # context in which queued kernels run (the face: no dispatch mode)
        self.streams = []
        self._stream_ids = 0
        self.queue = EventQueue()
        self.ranks = [Rank(self, r) for r in range(world_size)]
        self.tokens = clocks.TokenTable()
        self.detector = Detector(self)
        self.host_memory = None  # the torch face's host-side checks (simdist/faces/host_memory.py)
        self.collectives = CollectiveTable(self, group_class)
        self.transport = None  # how ranks run (simdist/ranks/), set by the runner
        self.ops_log = []  # executed ops, in execution order
        self.hasher = hashlib.blake2b(digest_size=16)
        self.fatal = None
        self.schedule_log = {}  # op key -> duration: the schedule a Replay policy plays back
        self.launches = 0

    def new_stream_id(self):
        self._stream_ids += 1
        return self._stream_ids

    # --- virtual time ----------------------------------------------------
    def drain(self, frontier):
        """Run every queued op due up to `frontier`, in time order."""
        q = self.queue
        heap = q.heap
        if heap and heap[0][0] <= frontier:
            with self.device_work():
                self._drain(frontier)
        if frontier > q.now and frontier != INF:
            q.now = frontier

    def _drain(self, frontier):
        import heapq
        q = self.queue
        heap = q.heap
        pop = heapq.heappop
        log = self.ops_log.append
        execute = self.detector.execute
        while heap and heap[0][0] <= frontier:
            t, _, item = pop(heap)
            q.now = t
            if type(item) is Op:
                fn = item.fn
                if item.watches is None and fn is not None:
                    try:  # the common case of Detector.execute, inlined: nobody watches this kernel's bytes
                        fn()
                    except Exception as e:
                        err = op_error(item, e)
                        if err is e:
                            raise
                        raise err from e
                    item.done = True
                else:
                    execute(item)
                item.fn = None
                item.watches = None
                log(item)
            else:
                item.execute()

    def drain_safe(self):
        """Apply everything no future launch can precede (keeps the queue short)."""
        frontier = INF
        for rs in self.ranks:
            st = rs.state
            if st == RUNNING:
                b = rs.host.clock
            elif st == NEW:
                return
            elif st == BLOCKED:
                b = rs.wait_bound()
                if b is None:
                    continue
            else:
                continue
            if b < frontier:
                frontier = b
        q = self.queue
        if frontier != INF and q.heap and q.heap[0][0] <= frontier:
            self.drain(frontier)

    # --- which rank runs next -----------------------------------------------
    def pick_next(self):
        """The rank that runs next: a new one, else the blocked one whose wait ends first (running device work
        up to there), else None when every rank is done. Raises Deadlock when ranks wait for each other."""
        for rs in self.ranks:
            if rs.state == NEW:
                return rs
        q = self.queue
        while True:
            blocked = [rs for rs in self.ranks if rs.state == BLOCKED]
            if not blocked:
                self.drain(INF)
                return None
            best = None
            for rs in blocked:
                t = rs.wait_cond()
                if t is not None and (best is None or t < best[0]):
                    best = (t, rs)
            if best is not None:
                return best[1]
            bounds = [b for b in (rs.wait_bound() for rs in blocked) if b is not None]
            if bounds:
                frontier = min(bounds)
                if frontier > q.now or (q.heap and q.heap[0][0] <= frontier):
                    self.drain(frontier)
                    continue
            raise self._deadlock()

    def _deadlock(self):
        lines = ["every live rank is waiting and none can proceed:"]
        for rs in self.ranks:
            if rs.state == BLOCKED:
                lines.append(f"  rank {rs.rank} waits in {rs.wait_what}:")
                lines.append(format_frames(rs.wait_frames, "      "))
            elif rs.state == DONE:
                lines.append(f"  rank {rs.rank} has finished")
        extra = self.collectives.pending_summary()
        if extra:
            lines.append(extra)
        return Deadlock("\n".join(lines))
