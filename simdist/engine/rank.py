"""One simulated rank (a process under torchrun): its host in virtual time, its devices, its current streams,
and how its host waits for device work (synchronize, a host-side rendezvous, a polling loop).

How ranks actually run and hand control to each other is the transport's business (simdist/ranks/); a
waiting rank tells the transport what it waits for (`block`), as a condition on virtual time.
"""
from __future__ import annotations

from .errors import Deadlock, SimulationError
from .frames import capture_frames, format_frames
from .ops import Host
from .streams import Device

NEW, RUNNING, BLOCKED, DONE = "new", "running", "blocked", "done"

POLL_QUANTUM_NS = 10_000  # how long a polling host spins between queries of work whose end is not known
POLL_LIMIT = 2000


class Rank:
    def __init__(self, world, rank):
        self.world = world
        self.rank = rank
        self.host = Host(rank)
        self.state = NEW
        self.polls = 0  # consecutive polls of work whose end is unknown while nothing is launched (poll_pending)
        self.poll_launches = -1
        self.wait_cond = None  # callable -> resume time (int) or None
        self.wait_bound = None  # callable -> known resume time or None
        self.wait_what = ""
        self.wait_frames = None
        self.devices = {}
        self.current_device = 0
        self.current_streams = {}  # device index -> the stream made current there (absent: the default stream)
        self.stream_contexts = []  # saved (device index, previous stream, previous device) of `with stream:` blocks
        self.returned = None
        self.error = None
        self.env = {}  # torchrun's per-process environment variables (RANK, LOCAL_RANK...)
        self.face = None  # the torch face's per-rank state while the rank runs (its dispatch mode)

    def device(self, index=None):
        if index is None:
            index = self.current_device
        d = self.devices.get(index)
        if d is None:
            if not 0 <= index < self.world.device_count:
                raise SimulationError(
                    f"rank {self.rank}: cuda:{index} does not exist (device_count() == {self.world.device_count})")
            d = self.devices[index] = Device(self.world, self.rank, index, self.world.stream_class)
            self.world.on_new_device(d)
        return d

    def current_stream(self, index=None):
        if index is None:
            index = self.current_device
        s = self.current_streams.get(index)
        if s is None:
            s = self.device(index).default_stream
        return s

    # --- waiting ---------------------------------------------------------
    def wait_op(self, op, what="synchronize"):
        """Block the host until `op` has completed; the host clock jumps to its end."""
        w = self.world
        if not (op.end is not None and op.end <= w.queue.now):
            self.block(lambda: op.end if (op.end is not None and op.end <= w.queue.now) else None,
                       lambda: op.end, what)
        host = self.host
        if op.end > host.clock:
            host.clock = op.end
        host.join_op(op)

    def poll_pending(self, op, what):
        """A query (Event.query, Stream.query, Work.is_completed) found `op` unfinished: the polling host spends
        time meanwhile. It sleeps to op's end when that is known (the next poll answers True), else a quantum
        in which other ranks run; a poll that would spin forever (nothing can finish op) is a Deadlock."""
        w = self.world
        target = op.end if op.end is not None else self.host.clock + POLL_QUANTUM_NS
        if op.end is None:
            # nothing launched anywhere since the last poll: if that lasts, nothing ever will
            self.polls = self.polls + 1 if w.launches == self.poll_launches else 0
            self.poll_launches = w.launches
            if self.polls > POLL_LIMIT:
                raise Deadlock(f"rank {self.rank} keeps polling {what} for work that depends on other ranks, "
                               f"and no rank has launched anything for {POLL_LIMIT} polls:\n"
                               + format_frames(capture_frames()))
        else:
            self.polls = 0
        if target > self.host.clock:
            self.block(lambda: target if w.queue.now >= target else None, lambda: target, what)
            if target > self.host.clock:
                self.host.clock = target

    def block(self, cond, bound, what):
        """Wait until `cond()` gives a time (the host resumes then); `bound()` is that time when already known.
        The transport runs other ranks and device work meanwhile."""
        self.wait_cond, self.wait_bound, self.wait_what = cond, bound, what
        self.wait_frames = capture_frames()
        self.state = BLOCKED
        self.world.transport.wait(self)
        self.wait_cond = self.wait_bound = None
