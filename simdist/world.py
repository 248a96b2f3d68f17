"""The simulated world: ranks as cooperatively scheduled host threads, their
devices and streams, one virtual-time event queue, and the deadlock detector.

Only one rank thread runs at a time and it runs until it must wait (a host
sync, a host-side rendezvous) or finishes; then the next rank is chosen by a
deterministic rule. So a run is a pure function of (program, world size,
seed, policy) whatever the OS does with threads (DESIGN.md 6, 8).
"""
from __future__ import annotations

import hashlib
import heapq
import threading

import torch

from . import clocks
from .errors import Deadlock, SimulationError, _Abort
from .cuda_api import CudaStreamAPI
from .timeline import Host, Op, capture_frames, format_frames
from .shadow import op_error

NEW, RUNNING, BLOCKED, DONE = "new", "running", "blocked", "done"
INF = float("inf")

_tls = threading.local()


def current_rank():
    """The RankState of the calling thread, or None outside a simulated rank."""
    return getattr(_tls, "rank", None)


class Stream(CudaStreamAPI):
    """A simulated CUDA stream: an ordered queue of ops on one device.

    `torch.cuda.Stream` is this class while a run is active; constructing it
    makes a new stream on the calling rank's device.
    """

    __slots__ = ("id", "dev", "name", "tail", "seq", "vc", "host_ver", "priority", "site", "__weakref__")

    def __new__(cls, device=None, priority=0, **kwargs):
        rs = current_rank()
        if rs is None:
            raise SimulationError("torch.cuda.Stream() was created outside a simulated rank")
        return rs.device(device_index(device, rs)).new_stream(priority)

    def __init__(self, *args, **kwargs):
        pass

    @classmethod
    def _make(cls, world, device, name, priority=0):
        self = object.__new__(cls)
        self.id = world.new_stream_id()
        self.dev = device
        self.name = name
        self.tail = None
        self.seq = 0
        self.vc = {}
        self.host_ver = -1
        self.priority = priority
        self.site = None
        world.streams.append(self)
        return self

    def __repr__(self):
        return f"<torch.cuda.Stream device={self.dev.torch_device} cuda_stream={self.id} ({self.name}) [simdist]>"

    def sync_host(self, host):
        if self.host_ver != host.ver:
            self.vc = clocks.join(self.vc, host.vc)
            self.host_ver = host.ver

    def full_vc(self):
        d = dict(self.vc)
        d[self.id] = self.seq
        return d

    def record_marker(self, host):
        """An event recorded now: completes when the stream reaches this point."""
        self.sync_host(host)
        m = Op(self, "event", "marker", host.clock)
        m.vc_full = self.full_vc()
        self.dev.world.schedule(m, (self.tail,))
        return m

    def wait_marker(self, host, marker):
        """Later work on this stream waits for `marker` (cudaStreamWaitEvent)."""
        self.sync_host(host)
        if marker.vc_full:
            self.vc = clocks.join(self.vc, marker.vc_full)
        m = Op(self, "wait", "marker", host.clock)
        m.vc_full = self.full_vc()
        self.dev.world.schedule(m, (self.tail, marker))
        self.tail = m


def device_index(device, rs):
    """Index of a device argument as torch.cuda accepts it (None, int, str, torch.device)."""
    if device is None:
        return rs.current_device
    if isinstance(device, int):
        return device
    if isinstance(device, str):
        device = __import__("torch").device(device)
    idx = getattr(device, "index", None)
    if getattr(device, "type", "cuda") != "cuda":
        raise ValueError(f"Expected a cuda device, but got: {device}")
    return rs.current_device if idx is None else idx


class Device:
    """One simulated GPU as seen by one rank (each process has its own context)."""

    def __init__(self, world, rank, index):
        from .memory import DeviceMemory
        self.world = world
        self.rank = rank
        self.index = index
        self.memory = DeviceMemory(world, index, world.poison, rank)
        self.default_stream = Stream._make(world, self, f"rank{rank}/cuda:{index}/default")
        self.n_user_streams = 0
        self.nccl_streams = {}
        import torch
        self.torch_device = torch.device("cuda", index)
        from .rng import SimGenerator
        # every CUDA generator of a fresh process starts from c10's default_rng_seed_val, on every rank
        self.generator = SimGenerator(self.torch_device).manual_seed(DEFAULT_RNG_SEED)

    def new_stream(self, priority=0):
        self.n_user_streams += 1
        return Stream._make(self.world, self, f"rank{self.rank}/cuda:{self.index}/stream{self.n_user_streams}",
                            priority)

    def nccl_stream(self, key):
        s = self.nccl_streams.get(key)
        if s is None:
            s = self.nccl_streams[key] = Stream._make(self.world, self, f"rank{self.rank}/nccl:{key}")
        return s


POLL_QUANTUM_NS = 10_000  # how long a polling host spins between queries of work whose end is not known
POLL_LIMIT = 2000
DEFAULT_RNG_SEED = 67280421310721  # c10::detail::default_rng_seed_val: a fresh process's CPU and CUDA seed
_cpu_gen = torch.default_generator


class RankState:
    def __init__(self, world, rank):
        self.world = world
        self.rank = rank
        self.host = Host(rank)
        self.state = NEW
        self.thread = None
        self.sem = threading.Semaphore(0)
        self.polls = 0  # consecutive polls of work whose end is unknown while nothing is launched (poll_pending)
        self.poll_launches = -1
        self.wait_cond = None  # callable -> resume time (int) or None
        self.wait_bound = None  # callable -> known resume time or None
        self.wait_what = ""
        self.wait_frames = None
        self.devices = {}
        self.current_device = 0
        self.current_streams = {}
        self.returned = None
        self.error = None
        self.mode = None
        self.env = {}
        self.pg_seq = {}

    def device(self, index=None):
        if index is None:
            index = self.current_device
        d = self.devices.get(index)
        if d is None:
            if not 0 <= index < self.world.device_count:
                raise SimulationError(
                    f"rank {self.rank}: cuda:{index} does not exist (device_count() == {self.world.device_count})")
            d = self.devices[index] = Device(self.world, self.rank, index)
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
        if not (op.end is not None and op.end <= w.now):
            self.block(lambda: op.end if (op.end is not None and op.end <= w.now) else None,
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
                from .errors import Deadlock
                raise Deadlock(f"rank {self.rank} keeps polling {what} for work that depends on other ranks, "
                               f"and no rank has launched anything for {POLL_LIMIT} polls:\n"
                               + format_frames(capture_frames()))
        else:
            self.polls = 0
        if target > self.host.clock:
            self.block(lambda: target if w.now >= target else None, lambda: target, what)
            if target > self.host.clock:
                self.host.clock = target

    def block(self, cond, bound, what):
        self.wait_cond, self.wait_bound, self.wait_what = cond, bound, what
        self.wait_frames = capture_frames()
        self.state = BLOCKED
        self.world.switch(self)
        self.wait_cond = self.wait_bound = None


class World:
    def __init__(self, world_size, seed, policy, nccl_profile, poison, device_count=None, avoid_record_streams=False):
        self.world_size = world_size
        self.device_count = device_count or world_size
        self.seed = seed
        self.policy = policy
        self.nccl_profile = nccl_profile
        self.avoid_record_streams = avoid_record_streams
        self.poison = poison
        self.streams = []
        self._stream_ids = 0
        self.heap = []
        self._tie = 0
        self.now = 0  # everything with time <= now has been applied to memory
        self.ranks = [RankState(self, r) for r in range(world_size)]
        self.tokens = clocks.TokenTable()
        from .shadow import HostReads, Shadow
        self.shadow = Shadow(self)
        self.host_reads = HostReads(self.shadow)
        self.ops_log = []  # (rank, stream name, op name, start, end, kind) in execution order
        self.hasher = hashlib.blake2b(digest_size=16)
        self.finished = threading.Event()
        self.fatal = None
        self.aborting = False
        self.fn = None
        from .distributed import DistState
        self.dist = DistState(self)
        self.schedule_log = {}
        self.launches = 0

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
        if frontier != INF and self.heap and self.heap[0][0] <= frontier:
            self.drain(frontier)

    def new_stream_id(self):
        self._stream_ids += 1
        return self._stream_ids

    # --- virtual time ----------------------------------------------------
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
            self._started(op)

    def _started(self, op):
        self._start_all([op])

    def _start_all(self, work):
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
            self._start_all(work)

    def push(self, t, item):
        if t < self.now:
            raise SimulationError(f"internal: event at {t} before the processed frontier {self.now}")
        self._tie += 1
        heapq.heappush(self.heap, (t, self._tie, item))

    def drain(self, frontier):
        heap = self.heap
        if heap and heap[0][0] <= frontier:
            # the queued kernels are plain CPU torch ops on the device bytes: no dispatch mode (a rank
            # thread's mode would see them as host ops)
            with torch._C._DisableTorchDispatch():
                self._drain(frontier)
        if frontier > self.now and frontier != INF:
            self.now = frontier

    def _drain(self, frontier):
        heap = self.heap
        pop = heapq.heappop
        log = self.ops_log.append
        execute = self.shadow.execute
        while heap and heap[0][0] <= frontier:
            t, _, item = pop(heap)
            self.now = t
            if type(item) is Op:
                fn = item.fn
                if item.watches is None and fn is not None:
                    try:  # the common case of Shadow.execute, inlined: nobody watches this kernel's bytes
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

    # --- scheduling of rank threads -----------------------------------------
    def switch(self, me):
        """Called by the running rank when it blocks or finishes."""
        me.cpu_rng = _cpu_gen.get_state()  # each rank is a process with its own CPU generator
        nxt = self._pick_next()
        if nxt is None:
            self.finished.set()
        else:
            self._resume(nxt)
        if me.state == DONE:
            return
        me.sem.acquire()
        if self.aborting:
            raise _Abort()
        _cpu_gen.set_state(me.cpu_rng)
        me.state = RUNNING
        t = me.wait_cond() if me.wait_cond is not None else None
        if t is not None and t > me.host.clock:
            me.host.clock = t

    def _resume(self, rs):
        if rs.state == NEW:
            rs.state = RUNNING
            rs.thread = threading.Thread(target=self._thread_main, args=(rs,), name=f"simdist-rank{rs.rank}",
                                         daemon=True)
            rs.thread.start()
        rs.sem.release()

    def _pick_next(self):
        try:
            return self._pick_next_unsafe()
        except BaseException as e:  # an op failed while the queue drained: end the run with it
            if self.fatal is None:
                self.fatal = e
            return None

    def _pick_next_unsafe(self):
        if self.fatal is not None:
            return None
        for rs in self.ranks:
            if rs.state == NEW:
                return rs
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
                if frontier > self.now or (self.heap and self.heap[0][0] <= frontier):
                    self.drain(frontier)
                    continue
            self.fatal = self._deadlock(blocked)
            return None

    def _deadlock(self, blocked):
        lines = ["every live rank is waiting and none can proceed:"]
        for rs in self.ranks:
            if rs.state == BLOCKED:
                lines.append(f"  rank {rs.rank} waits in {rs.wait_what}:")
                lines.append(format_frames(rs.wait_frames, "      "))
            elif rs.state == DONE:
                lines.append(f"  rank {rs.rank} has finished")
        extra = self.dist.pending_summary() if self.dist is not None else ""
        if extra:
            lines.append(extra)
        return Deadlock("\n".join(lines))

    def _thread_main(self, rs):
        rs.sem.acquire()
        _tls.rank = rs
        _cpu_gen.manual_seed(DEFAULT_RNG_SEED)  # a fresh process's CPU generator
        from .patches import enter_rank, exit_rank
        try:
            if self.aborting:
                raise _Abort()
            enter_rank(rs)
            try:
                rs.returned = self.fn(rs.rank)
            finally:
                exit_rank(rs)
            if self.dist is not None:
                self.dist.on_rank_exit(rs)
        except _Abort:
            pass
        except BaseException as e:  # noqa: BLE001 - re-raised by the runner naming the rank
            rs.error = e
            if self.fatal is None:
                self.fatal = e
        finally:
            _tls.rank = None
            rs.state = DONE
            if self.aborting:
                self.finished.set()
            elif self.fatal is not None:
                self.finished.set()
            else:
                nxt = self._pick_next()
                if nxt is None:
                    self.finished.set()
                else:
                    self._resume(nxt)

    def run_ranks(self, fn):
        self.fn = fn
        caller_rng = _cpu_gen.get_state()  # the ranks' generators must not disturb the caller's
        try:
            self._resume(self._pick_next())
            self.finished.wait()
            if self.fatal is not None:
                self._abort_all()
        finally:
            _cpu_gen.set_state(caller_rng)

    def _abort_all(self):
        self.aborting = True
        for rs in self.ranks:
            if rs.state in (BLOCKED, RUNNING) and rs.thread is not None:
                self.finished.clear()
                rs.sem.release()
                rs.thread.join(timeout=30)
        for rs in self.ranks:
            if rs.thread is not None:
                rs.thread.join(timeout=30)

