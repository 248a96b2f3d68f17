"""Simulated devices and streams: an ordered queue of ops per stream, event markers, waits.

Rules (CUDA Programming Guide, "Streams" and "Events"):
- work on one stream runs in launch order;
- recording an event captures the work queued on the stream so far (a marker op that ends when it does);
- a wait makes later work on the waiting stream start after the marker (cudaStreamWaitEvent), without
  blocking the host.
The torch.cuda API over these objects lives in simdist/faces/cuda.py (a subclass of Stream).
"""
from __future__ import annotations

from . import clocks
from .allocator import DeviceMemory
from .ops import Op


# c10/cuda/CUDAStream.cpp: kStreamsPerPool = 1 << kStreamsPerPoolBits (5); CUDAStream.h:
# max_compile_time_stream_priorities = 4 (priority levels 0, -1, -2, -3)
STREAMS_PER_POOL = 32
MAX_PRIORITIES = 4


class Stream:
    """A simulated CUDA stream: an ordered queue of ops on one device."""

    __slots__ = ("id", "dev", "name", "tail", "seq", "vc", "host_ver", "priority", "pool_slot", "__weakref__")

    @classmethod
    def make(cls, device, name, priority=0):
        self = object.__new__(cls)
        rank = device.owner
        self.id = rank.new_stream_id()
        self.dev = device
        self.name = name
        self.tail = None  # the last op queued on this stream (or the last wait marker)
        self.seq = 0  # launched ops so far: an op is (stream, seq) in vector clocks
        self.vc = {}  # what every op queued next knows (copy-on-write)
        self.host_ver = -1  # the host clock version already joined into vc
        self.priority = priority
        self.pool_slot = None  # (priority level, index) of a stream of the device's pool (Device.new_stream)
        rank.streams.append(self)
        rank.stream_by_id[self.id] = self
        return self

    def __repr__(self):
        return f"<simdist Stream {self.name} id={self.id}>"

    def sync_host(self, host):
        """Work queued from now on knows what the host knows (program order on the host)."""
        if self.host_ver != host.ver:
            hv = host.vc
            tokens = self.dev.owner.tokens
            if tokens.has_tokens(hv):
                # in place (the host knows it): the host's clock collects the token of every collective it
                # waited for, and would hand each again to every stream to expand at its next collective
                tokens.merge(hv)
            self.vc = clocks.join(self.vc, hv)
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
        self.dev.owner.queue.schedule(m, (self.tail,))
        return m

    def wait_marker(self, host, marker):
        """Later work on this stream waits for `marker` (cudaStreamWaitEvent)."""
        self.sync_host(host)
        if marker.vc_full:
            self.vc = clocks.join(self.vc, marker.vc_full)
        m = Op(self, "wait", "marker", host.clock)
        m.vc_full = self.full_vc()
        self.dev.owner.queue.schedule(m, (self.tail, marker))
        self.tail = m


class Device:
    """One simulated GPU as seen by one rank (each process has its own context): memory and streams."""

    def __init__(self, rank, index, stream_class=Stream):
        self.owner = rank  # the simdist/engine/rank.py Rank whose process owns this device context
        self.rank = rank.rank
        self.index = index
        self.stream_class = stream_class
        self.memory = DeviceMemory(rank, index, rank.world.poison)
        self.default_stream = stream_class.make(self, f"rank{rank.rank}/cuda:{index}/default")
        self.n_user_streams = 0
        self.user_pools = {}  # priority level -> the pool's streams made so far (torch.cuda.Stream())
        self.pool_counters = {}  # priority level -> streams handed out (round-robin over the pool)
        self.nccl_streams = {}
        # set by the torch face when the device is made (World.on_new_device): how torch names it, its generator
        self.torch_device = None
        self.generator = None

    def new_stream(self, priority=0):
        """A stream from the device's pool, as torch.cuda.Stream() takes one (c10/cuda/CUDAStream.h, "Stream pool
        note"): STREAMS_PER_POOL streams per priority level, handed out round-robin, so the 33rd stream of a
        priority is the first one again ("kernels enqueued on them cannot run concurrently"). A priority is
        clamped to the levels torch keeps (0 down to -(MAX_PRIORITIES - 1))."""
        level = min(max(-priority, 0), MAX_PRIORITIES - 1)
        pool = self.user_pools.setdefault(level, [])
        k = self.pool_counters.get(level, 0)
        self.pool_counters[level] = k + 1
        if len(pool) == STREAMS_PER_POOL:
            return pool[k % STREAMS_PER_POOL]
        self.n_user_streams += 1
        s = self.stream_class.make(
            self, f"rank{self.rank}/cuda:{self.index}/stream{self.n_user_streams}", -level)
        s.pool_slot = (level, len(pool))
        pool.append(s)
        return s

    def nccl_stream(self, key):
        """The internal stream ProcessGroupNCCL keeps per group (or P2P pair) on this device."""
        s = self.nccl_streams.get(key)
        if s is None:
            s = self.nccl_streams[key] = self.stream_class.make(self, f"rank{self.rank}/nccl:{key}")
        return s
