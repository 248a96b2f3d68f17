"""One simulated rank (a process under torchrun): its host in virtual time, its devices and streams, its own
event queue, detector and view of the collectives, and how its host waits.

A rank shares nothing with the others: what it learns of them comes in messages (simdist/engine/messages.py),
delivered by the transport at the start of each of its turns (simdist/engine/turns.py). So a rank's run depends
only on its program and on what its peers told it, never on how the transport interleaves ranks, and ranks can
be threads of one process or processes of their own (simdist/ranks/).
"""
from __future__ import annotations

import heapq

from . import clocks
from .collectives import CollectiveTable
from .detector import Detector, op_error
from .errors import Deadlock, InvalidDevice, SimulationError
from .frames import capture_frames, format_frames
from .ops import Host, Op
from .scheduler import INF, EventQueue
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
        # waiting
        self.polls = 0  # consecutive polls while nothing was launched anywhere (poll_pending)
        self.poll_launches = -1
        self.wait_cond = None  # callable -> resume time (int) or None
        self.wait_bound = None  # callable -> known resume time or None
        self.wait_what = ""
        self.wait_frames = None
        # devices and the torch face
        self.devices = {}
        self.current_device = 0
        self.current_streams = {}  # device index -> the stream made current there (absent: the default stream)
        self.stream_contexts = []  # saved (device index, previous stream, previous device) of `with stream:` blocks
        self.env = {}  # torchrun's per-process environment variables (RANK, LOCAL_RANK...)
        self.face = None  # the torch face's per-rank state while the rank runs (its dispatch mode)
        self.returned = None
        self.error = None
        # the rank's own engine
        self.streams = []
        self.stream_by_id = {}  # Stream.id -> the stream (how torch's C++ side names it: simdist/faces/guard_events.py)
        # the torch face's backward-pass bookkeeping (simdist/faces/guard_events.py in_backward)
        self.backward_depth = 0
        self.backward_made = None
        self.backward_keys = None
        self._stream_ids = 0
        self.queue = EventQueue()
        self.tokens = clocks.TokenTable()
        self.detector = Detector(self)
        self.collectives = CollectiveTable(self, world.group_class)
        self.host_memory = None  # the torch face's host-side checks (simdist/faces/host_memory.py)
        self.policy = world.policy.for_rank(self)
        self.ops_log = []  # executed ops, in execution (virtual time) order
        self.schedule_log = {}  # op key -> duration: the schedule a Replay policy plays back
        self.launches = 0
        # CUDA_LAUNCH_BLOCKING=1 when CUDA was initialized (the torch face sets it at the rank's first device):
        # every kernel and copy launch returns when the work has completed (engine/launch.py)
        self.launch_blocking = False
        self.floor = 0  # every event this rank does not know of yet happens at or after this time (turns.py)
        self.world_launches = 0  # launches of every rank, as of the last turn
        # [frame, its f_lasti, its captured frames] of the call that runs the program (simdist/session.py
        # rank_body), None outside it: the frames above the program, for launch_kernel
        self.stack_base = None

    # --- devices -------------------------------------------------------------
    def new_stream_id(self):
        self._stream_ids += 1
        return (self.rank << clocks.STREAM_ID_BITS) + self._stream_ids

    def device(self, index=None):
        if index is None:
            index = self.current_device
        d = self.devices.get(index)
        if d is None:
            if not 0 <= index < self.world.device_count:
                raise getattr(self.world, "invalid_device", InvalidDevice)(
                    f"CUDA error: invalid device ordinal (rank {self.rank}: cuda:{index} does not exist, "
                    f"device_count() == {self.world.device_count})")
            d = self.devices[index] = Device(self, index, self.world.stream_class)
            self.world.on_new_device(d)
        return d

    def current_stream(self, index=None):
        if index is None:
            index = self.current_device
        s = self.current_streams.get(index)
        if s is None:
            s = self.device(index).default_stream
        return s

    # --- messages ------------------------------------------------------------
    def post(self, ranks, msg):
        """Send msg to every rank in `ranks` but this one."""
        me = self.rank
        for r in ranks:
            if r != me:
                self.world.transport.post(r, msg)

    def deliver(self, messages):
        for msg in messages:
            self.collectives.on_message(msg)
        return bool(messages)

    # --- device time -------------------------------------------------------------
    def drain(self, frontier):
        """Run the queued device work due up to `frontier`, in time order, as far as what this rank knows allows:
        not past the start of an own collective side whose peers have not all started (the collective's data moves
        then), not past a collective's end before every participant's inputs are in. Returns whether it ran
        anything."""
        collectives = self.collectives
        limit = collectives.drain_limit()
        if limit is not None:
            frontier = min(frontier, max(limit, self.floor))
        q = self.queue
        heap = q.heap
        if not heap or heap[0][0] > frontier:
            if frontier > q.now and frontier != INF and (not heap or heap[0][0] > frontier):
                q.now = frontier
            return False
        ran = False
        with self.world.device_work():
            log = self.ops_log.append
            execute = self.detector.execute
            pop = heapq.heappop
            while heap and heap[0][0] <= frontier:
                t, _, item = heap[0]
                if type(item) is Op:
                    pop(heap)
                    q.now = t
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
                elif item.ready():
                    pop(heap)
                    q.now = t
                    item.execute()
                else:
                    return True if ran else False  # a collective's end waits for its peers' inputs
                ran = True
                if collectives.pending:  # (drain_limit is None without pending collectives: no call per kernel)
                    limit = collectives.drain_limit()
                    if limit is not None and limit < frontier:
                        frontier = max(limit, self.floor)
        if frontier > q.now and frontier != INF:
            q.now = frontier
        return ran

    def drain_safe(self):
        """Apply what no future launch of this rank can precede (keeps the queue short)."""
        q = self.queue
        if q.heap and q.heap[0][0] <= self.host.clock:
            self.drain(self.host.clock)

    def service(self):
        """What a rank does at each turn besides running its program: device work up to where it may go."""
        if self.state == DONE:
            target = INF
        else:
            target = max(self.host.clock, self.floor)
            if self.state == BLOCKED and self.wait_bound is not None:
                b = self.wait_bound()
                if b is not None and b > target:
                    target = b
        return self.drain(target)

    def next_event(self):
        """The time of the next queued event (INF when none)."""
        h = self.queue.heap
        return h[0][0] if h else INF

    # --- waiting ---------------------------------------------------------
    def wait_op(self, op, what="synchronize"):
        """Block the host until `op` has completed; the host clock jumps to its end."""
        q = self.queue
        if not (op.end is not None and op.end <= q.now):
            self.block(lambda: op.end if (op.end is not None and op.end <= q.now) else None,
                       lambda: op.end, what)
        host = self.host
        if op.end > host.clock:
            host.clock = op.end
        host.join_op(op)

    def wait_op_until(self, op, deadline, what):
        """Block the host until `op` has completed or virtual time `deadline`, whichever comes first; True if op
        completed (the host clock jumps to its end), False at the deadline (the clock is then the deadline).
        The deadline is a known resume time, so a world whose other ranks all wait is not deadlocked: time moves
        on to it."""
        q = self.queue

        def done():
            return op.end is not None and op.end <= q.now and op.end <= deadline

        if not done():
            self.block(lambda: (op.end if done() else deadline if q.now >= deadline else None),
                       lambda: op.end if op.end is not None and op.end < deadline else deadline, what)
        if not done():
            if deadline > self.host.clock:
                self.host.clock = deadline
            return False
        host = self.host
        if op.end > host.clock:
            host.clock = op.end
        host.join_op(op)
        return True

    def synchronize_device(self, index, what="torch.cuda.synchronize()"):
        """The host waits until every stream of device `index` has finished the work queued so far."""
        dev = self.device(index)
        markers = [s.record_marker(self.host) for s in self.streams if s.dev is dev and s.tail is not None]
        for m in markers:
            self.wait_op(m, what)

    def poll_pending(self, op, what):
        """A query (Event.query, Stream.query, Work.is_completed) found `op` unfinished: the polling host spends
        time meanwhile. It sleeps to op's end when that is known (the next poll answers True), else a quantum
        in which other ranks run; a poll that would spin forever (nothing can finish op) is a Deadlock."""
        q = self.queue
        target = op.end if op.end is not None else self.host.clock + POLL_QUANTUM_NS
        if op.end is None:
            # nothing launched anywhere since the last poll: if that lasts, nothing ever will
            total = self.world_launches + self.launches
            self.polls = self.polls + 1 if total == self.poll_launches else 0
            self.poll_launches = total
            if self.polls > POLL_LIMIT:
                raise Deadlock(f"rank {self.rank} keeps polling {what} for work that depends on other ranks, "
                               f"and no rank has launched anything for {POLL_LIMIT} polls:\n"
                               + format_frames(capture_frames()))
        else:
            self.polls = 0
        if target > self.host.clock:
            self.block(lambda: target if q.now >= target else None, lambda: target, what)
            if target > self.host.clock:
                self.host.clock = target

    def block(self, cond, bound, what):
        """Wait until `cond()` gives a time (the host resumes then); `bound()` is that time when already known.
        Device work of this rank alone may satisfy it; otherwise the transport runs the other ranks' turns."""
        self.wait_cond, self.wait_bound, self.wait_what = cond, bound, what
        self.state = BLOCKED
        while True:
            t = cond()
            if t is not None:
                break
            b = bound()
            if b is None or not self.drain(max(b, self.host.clock)):
                self.wait_frames = capture_frames()
                self.world.transport.wait(self)
                t = cond()
                break
        self.state = RUNNING
        if t is not None and t > self.host.clock:
            self.host.clock = t
        self.wait_cond = self.wait_bound = None

    # --- the end of a run -------------------------------------------------------
    def describe_wait(self):
        if self.state == BLOCKED:
            return f"  rank {self.rank} waits in {self.wait_what}:\n{format_frames(self.wait_frames, '      ')}"
        if self.state == DONE:
            return f"  rank {self.rank} has finished"
        return f"  rank {self.rank} is {self.state}"
