"""torch.cuda as seen from inside a simulated rank: streams, events, devices, memory stats.

Rules (CUDA programming guide, "Streams" and "Events"; torch/cuda/streams.py):
- work on one stream runs in launch order;
- `event.record(s)` captures the work queued on `s` so far; `s2.wait_event(e)`
  makes later work on `s2` wait for it, without blocking the host;
  waiting on a never-recorded event is a no-op;
- `s2.wait_stream(s1)` == record an event on s1 and wait for it on s2;
- `synchronize()` / `event.synchronize()` / `stream.synchronize()` block the
  host until the work completes; `query()` asks without blocking.
"""
from __future__ import annotations

import collections
import contextlib
from types import SimpleNamespace

import torch

from ..engine import allocator, cost
from ..engine import streams as engine_streams
from ..engine.context import current_rank, outside_rank, process_rank
from ..engine.errors import SimulationError, UnsupportedOperation
from ..engine.launch import launch
from . import guard, sync_debug


def _rank():
    me = current_rank()
    if me is None:
        raise outside_rank("torch.cuda", "torch.cuda was used outside a simulated rank")
    return me


def _set_current(me, index):
    """The rank's current device, also where torch's C++ side asks for it (simdist/faces/guard.py)."""
    me.current_device = index
    guard.set_device(index)


def device_index(device, me):
    """Index of a device argument as torch.cuda accepts it (None, int, str, torch.device)."""
    if device is None:
        return me.current_device
    if isinstance(device, int):
        return device
    if isinstance(device, str):
        device = torch.device(device)
    idx = getattr(device, "index", None)
    if getattr(device, "type", "cuda") != "cuda":
        raise ValueError(f"Expected a cuda device, but got: {device}")
    return me.current_device if idx is None else idx


class Stream(engine_streams.Stream):
    """torch.cuda.Stream in a simulated rank: the engine's stream (simdist/engine/streams.py) with torch's API.

    `torch.cuda.Stream` is this class while a run is active; constructing it makes a new stream on the calling
    rank's device.
    """

    __slots__ = ()

    def __new__(cls, device=None, priority=0, **kwargs):
        me = current_rank()
        if me is None:
            raise outside_rank("torch.cuda.Stream()", "torch.cuda.Stream() was created outside a simulated rank")
        if "stream_id" in kwargs and "device_index" in kwargs:
            return _existing_stream(me, kwargs["stream_id"], kwargs["device_index"])
        if kwargs.get("stream_ptr") is not None:
            return _stream_from_pointer(me, kwargs["stream_ptr"], device)
        return me.device(device_index(device, me)).new_stream(priority)

    def __init__(self, *args, **kwargs):
        pass

    def __repr__(self):
        # torch's repr shows the cudaStream_t in hex (0x0: the default stream, the null stream)
        return (f"<torch.cuda.Stream device={self.dev.torch_device} cuda_stream={self.cuda_stream:#x} ({self.name}) "
                "[simdist]>")

    @property
    def device(self):
        return self.dev.torch_device

    @property
    def device_index(self):
        return self.dev.index

    @property
    def device_type(self):
        return 1  # DeviceType.CUDA

    @property
    def cuda_stream(self):
        # the cudaStream_t: the default stream is the null stream, 0 on every device (an H200, torch 2.11:
        # ci/gpu_c_facts.py default_ids); another stream's handle is a pointer, here its simulated id (non-zero)
        return 0 if self is self.dev.default_stream else self.id

    @property
    def stream_id(self):
        return gpu_stream_id(self)

    @property
    def native_handle(self):
        return self.cuda_stream  # torch.Stream.native_handle: the cudaStream_t, as cuda_stream gives it

    @staticmethod
    def priority_range():
        """(least, greatest) priority of the device's stream pools (torch._C._CudaStreamBase.priority_range:
        cudaDeviceGetStreamPriorityRange with the greatest clamped to -(max_compile_time_stream_priorities - 1),
        c10/cuda/CUDAStream.h): (0, -3) on an H200 with torch 2.11, as measured."""
        return (0, -(engine_streams.MAX_PRIORITIES - 1))

    def is_capturing(self):
        """torch.Stream.is_capturing: no CUDA graph capture is ever underway (simdist refuses capture by name)."""
        return False

    def wait_event(self, event):
        event.wait(self)

    def wait_stream(self, stream):
        if not isinstance(stream, engine_streams.Stream):  # a torch.Stream (torch.accelerator, the fake guard)
            stream = _as_sim_stream(stream)
        self.wait_event(stream.record_event())

    def record_event(self, event=None):
        if event is None:
            event = Event()
        event.record(self)
        return event

    def query(self):
        me = _rank()
        t = self.tail
        if t is None:
            return True
        if t.end is not None and t.end <= me.host.clock:
            # the host saw the work done: what it reads next (a pinned buffer) holds the results
            me.wait_op(t.full(), "Stream.query()")
            return True
        me.poll_pending(t, "Stream.query()")
        return False

    def synchronize(self):
        me = _rank()
        sync_debug.synchronizing(me)  # c10 stream_synchronize
        me.wait_op(self.record_marker(me.host), "Stream.synchronize()")

    def __eq__(self, other):
        return isinstance(other, engine_streams.Stream) and other.id == self.id

    def __ne__(self, other):
        # torch.cuda.Stream defines __eq__ only; != is torch.Stream's C++ comparison of the id triple, so a generic
        # torch.Stream naming this stream (torch.accelerator's) is neither == nor != to it (measured on an H200)
        if isinstance(other, torch.Stream):
            if other.device_type != 1 or other.device_index != self.dev.index:
                return True
            return sim_stream(_rank(), other) is not self
        return not self.__eq__(other)

    def __hash__(self):
        return hash(("simdist-stream", self.id))

    def __enter__(self):
        me = _rank()
        prev = me.current_streams.get(self.dev.index)
        me.stream_contexts.append((self.dev.index, prev, me.current_device))
        me.current_streams[self.dev.index] = self
        guard.streams_changed()
        _set_current(me, self.dev.index)

    def __exit__(self, *exc):
        me = _rank()
        idx, prev, dev = me.stream_contexts.pop()
        if prev is None:
            me.current_streams.pop(idx, None)
        else:
            me.current_streams[idx] = prev
        guard.streams_changed()
        _set_current(me, dev)
        return False


def sim_stream(me, s):
    """A simulated stream for `s`: a simdist stream as it is; the torch.Stream torch.accelerator hands out, the
    stream it names; another torch.Stream of a CUDA device as the fake guard numbers them (0: the device's current
    stream, otherwise the simulated stream of that id; simdist/faces/guard_events.py)."""
    if s is None or isinstance(s, engine_streams.Stream):
        return s
    named = getattr(s, "_sim", None)
    if named is not None:
        return named
    if isinstance(s, torch.Stream) and s.device_type == 1:
        from .guard_events import _stream
        return _stream(me, s.device_index if s.device_index >= 0 else me.current_device, s.stream_id)
    raise UnsupportedOperation(f"{s!r} as a stream of a simulated rank is not modelled by simdist")


def _as_sim_stream(stream):
    return sim_stream(_rank(), stream)


def gpu_stream_id(s):
    """The StreamId a GPU gives the stream (c10/cuda/CUDAStream.cpp makeStreamId): 0 for the default stream (the
    null stream); for a pool stream `(index << (kStreamTypeBits + 1)) | (type << 1) | 1`, kStreamTypeBits 4, the
    index its place in its pool (0-31, round-robin) and the type its priority level + 1 (getStreamFromPool:
    `StreamIdType(pri_idx + 1)`, pri_idx = min(-priority, max_stream_priorities - 1)): the first torch.cuda.Stream()
    of a device is 3 (measured on an H200), the second 35, the first of priority -1 is 5. A stream simdist keeps
    outside the pools (an NCCL group's internal one; on a GPU it is a pool stream) gets an index past the pool's
    five bits, so it names no pool stream."""
    if s is s.dev.default_stream:
        return 0
    slot = s.pool_slot
    if slot is None:
        return ((32 + (s.id & 0xFFFF)) << 5) | (1 << 1) | 1
    level, index = slot
    return (index << 5) | ((level + 1) << 1) | 1


def _existing_stream(me, stream_id, index):
    """torch.cuda.Stream(stream_id=..., device_index=..., device_type=...) wraps the stream of that id, it makes
    none (torch/cuda/streams.py Stream.__new__: `if device is None or ("stream_id" in kwargs and "device_index" in
    kwargs): return super().__new__(cls, priority=priority, **kwargs)`, the c10::Stream unpacked from the triple);
    the id is the one a GPU gives (gpu_stream_id, what `stream_id` reads): 0 is the device's default stream."""
    d = me.device(index)
    if stream_id == 0:
        return d.default_stream
    for s in me.streams:
        if s.dev is d and s is not d.default_stream and gpu_stream_id(s) == stream_id:
            return s
    raise UnsupportedOperation(f"torch.cuda.Stream(stream_id={stream_id}, device_index={index}): no stream of that "
                               f"id on cuda:{index} in this simulated rank (simdist wraps only streams made in it)")


def _stream_from_pointer(me, ptr, device):
    """torch.cuda.Stream(stream_ptr=p) wraps the cudaStream_t p (torch/csrc/cuda/Stream.cpp THCPStream_pynew:
    getStreamFromExternal), it makes none: p is a simulated stream's `cuda_stream` (0: the device's default
    stream). A pointer no stream of this rank has came from outside torch: refused, as ExternalStream is."""
    ptr = int(ptr)
    if ptr == 0:
        return me.device(device_index(device, me)).default_stream
    for st in me.streams:
        if st.cuda_stream == ptr:
            return st
    raise UnsupportedOperation(f"torch.cuda.Stream(stream_ptr={ptr:#x}): a CUDA stream made outside torch (no "
                               "stream of this simulated rank has that cudaStream_t) is not modelled by simdist")


class Event:
    """torch.cuda.Event in a simulated rank; times are virtual."""

    def __init__(self, enable_timing=False, blocking=False, interprocess=False, external=False):
        self.enable_timing = enable_timing
        self.blocking = blocking
        self.marker = None
        self.stream = None

    def record(self, stream=None):
        me = _rank()
        if stream is None:
            stream = me.current_stream()
        elif not isinstance(stream, engine_streams.Stream):
            stream = _as_sim_stream(stream)
        if self.stream is not None and self.stream.dev is not stream.dev:
            # c10/cuda/CUDAEvent.h record: an event takes its device from the first stream that records it
            raise RuntimeError(f"Event device {self.stream.dev.index} does not match recording stream's device "
                               f"{stream.dev.index}.")
        self.stream = stream
        self.marker = stream.record_marker(me.host)

    def wait(self, stream=None):
        me = _rank()
        if stream is None:
            stream = me.current_stream()
        elif not isinstance(stream, engine_streams.Stream):
            stream = _as_sim_stream(stream)
        if self.marker is not None:
            stream.wait_marker(me.host, self.marker)

    def query(self):
        me = _rank()
        m = self.marker
        if m is None:
            return True
        if m.end is not None and m.end <= me.host.clock:
            # the host saw the work done: what it reads next (a pinned buffer) holds the results
            me.wait_op(m, "Event.query()")
            return True
        me.poll_pending(m, "Event.query()")
        return False

    def synchronize(self):
        me = _rank()
        if self.marker is not None:
            me.wait_op(self.marker, "Event.synchronize()")

    def elapsed_time(self, end_event):
        # c10/cuda/CUDAEvent.h elapsed_time: the checks in this order, the first two TORCH_CHECK_VALUE (ValueError)
        a, b = self.marker, end_event.marker
        if not (self.enable_timing and end_event.enable_timing):
            raise ValueError("Both events must be created with argument 'enable_timing=True'.")
        if a is None or b is None:
            raise ValueError("Both events must be recorded before calculating elapsed time.")
        me = _rank()
        if a.end is None or b.end is None or max(a.end, b.end) > me.host.clock:
            raise RuntimeError("Both events must be completed before calculating elapsed time.")
        if self.stream.dev is not end_event.stream.dev:
            # CUDA Programming Guide, "Stream and Event Behavior": "cudaEventElapsedTime() will fail if the two input
            # events are associated to different devices" (C10_CUDA_CHECK raises)
            raise RuntimeError(f"CUDA error: cudaEventElapsedTime of events on different devices (cuda:"
                               f"{self.stream.dev.index} and cuda:{end_event.stream.dev.index}) fails")
        return (b.end - a.end) / 1e6

    @property
    def cuda_event(self):
        return id(self)

    def ipc_handle(self):
        raise UnsupportedOperation("torch.cuda.Event.ipc_handle (an event shared with another process through CUDA "
                                   "IPC) is not modelled by simdist")

    @classmethod
    def from_ipc_handle(cls, device, handle):
        raise UnsupportedOperation("torch.cuda.Event.from_ipc_handle (an event of another process, through CUDA "
                                   "IPC) is not modelled by simdist")

    def __repr__(self):
        return f"<torch.cuda.Event {'recorded' if self.marker is not None else 'uninitialized'} [simdist]>"


# --- module-level functions ---------------------------------------------------------
def is_available():
    return True


def device_count():
    return _rank().world.device_count


def current_device():
    me = _rank()
    me.device()  # torch.cuda.current_device() initializes CUDA (torch/cuda/__init__.py: _lazy_init())
    return me.current_device


def lazy_init():
    """torch.cuda.init() / _lazy_init(): CUDA is initialized. No device object is made here: torch's C++ calls
    _lazy_init once per process (torch/csrc/utils/device_lazy_init.cpp caches it), at the first CUDA tensor of
    the first run only, so a device made here (the current one, maybe never used) was in that run's streams and
    digest and not in the next (a program using only cuda:1 gave two digests for one seed)."""
    _rank().cuda_initialized = True


def is_initialized():
    """Whether this rank has initialized CUDA. torch initializes it lazily, at the first call that needs a
    device (a CUDA tensor, a stream, set_device, current_device, ...; torch/cuda/__init__.py `_lazy_init`), not at
    import: DeviceMesh picks each rank's GPU from LOCAL_RANK only while it is uninitialized
    (torch/distributed/device_mesh.py `_setup_world_group_and_device`). A rank's first device object is made
    exactly there (simdist/engine/rank.py `Rank.device`), so "initialized" is "has a device". A host thread the
    program started (DataLoader's pin-memory thread) asks for its process's rank; with none to name, True."""
    me = current_rank() or process_rank()
    return True if me is None else bool(me.devices) or getattr(me, "cuda_initialized", False)


def set_device(device):
    me = _rank()
    idx = device_index(device, me)
    if idx >= 0:
        me.device(idx)
        _set_current(me, idx)


class device:
    """torch.cuda.device(idx): a context manager that switches the current device."""

    def __init__(self, device):
        me = _rank()
        self.idx = device_index(device, me) if device is not None else -1
        self.prev = None

    def __enter__(self):
        me = _rank()
        self.prev = me.current_device
        if self.idx >= 0:
            me.device(self.idx)
            _set_current(me, self.idx)

    def __exit__(self, *exc):
        _set_current(_rank(), self.prev)
        return False


class device_of(device):
    def __init__(self, obj):
        super().__init__(obj.device.index if getattr(obj, "is_cuda", False) else -1)


def current_stream(device=None):
    me = _rank()
    return me.current_stream(device_index(device, me))


def default_stream(device=None):
    me = _rank()
    return me.device(device_index(device, me)).default_stream


_NVML_QUERIES = ("utilization", "temperature", "power_draw", "clock_rate", "memory_usage", "device_memory_used")


def _exchange_device(device):
    """torch.cuda._exchange_device / _maybe_exchange_device (torch._C._cuda_exchangeDevice, what
    torch.cuda._DeviceGuard enters and leaves with): makes `device` current and returns the previous one; -1 for a
    negative index, and nothing changes."""
    if device < 0:
        return -1
    me = _rank()
    prev = me.current_device
    set_device(device)
    return prev


def _set_stream_by_id(stream_id, device_index, device_type):
    """torch.cuda._set_stream_by_id (torch._C._cuda_setStream): the stream of that id triple becomes current."""
    set_stream(_existing_stream(_rank(), stream_id, device_index))


def set_stream(stream):
    """torch.cuda.set_stream: the stream becomes current on its device, and its device becomes the current one
    (torch/csrc/cuda/Module.cpp THCPModule_setStream_wrap: `if (device != stream.device_index())
    THCPModule_setDevice(stream.device_index())`)."""
    if stream is None:
        return
    me = _rank()
    if not isinstance(stream, engine_streams.Stream):  # a torch.Stream (torch.accelerator's): by its id triple
        stream = _as_sim_stream(stream)
    me.current_streams[stream.dev.index] = stream
    guard.streams_changed()
    if me.current_device != stream.dev.index:
        _set_current(me, stream.dev.index)


class StreamContext:
    """torch.cuda.stream(s): make `s` current (and its device) inside the block."""

    def __init__(self, stream):
        if stream is not None and not isinstance(stream, engine_streams.Stream):
            stream = _as_sim_stream(stream)  # a torch.Stream names a CUDA stream (torch.cuda.StreamContext takes one)
        self.stream = stream

    def __enter__(self):
        s = self.stream
        if s is None:
            return None
        s.__enter__()
        return s

    def __exit__(self, *exc):
        if self.stream is not None:
            self.stream.__exit__(*exc)
        return False


def stream(stream):
    return StreamContext(stream)


def synchronize(device=None):
    me = _rank()
    me.synchronize_device(device_index(device, me))


def _sleep(cycles):
    me = _rank()
    launch(me, me.current_stream(), "_sleep", "sleep", None, (), (), 0, dur=cost.sleep_ns(int(cycles)))


def empty_cache():
    """The host first waits for the events of blocks freed with record_stream uses still pending, which then go
    back to their pools, and only then are whole free segments released (c10/cuda/CUDACachingAllocator.cpp
    release_cached_blocks: synchronize_and_free_events (cudaEventSynchronize on each), then release_blocks)."""
    me = _rank()
    for d in me.devices.values():
        for _alloc, markers in list(d.memory.pending_frees):
            for m in markers:
                me.wait_op(m, "torch.cuda.empty_cache()")
        d.memory.empty_cache()


def _mem(device):
    me = _rank()
    return me.device(device_index(device, me)).memory


def _alloc_conf(me):
    """The allocator settings of this rank: PYTORCH_CUDA_ALLOC_CONF / PYTORCH_ALLOC_CONF, then what
    torch._C._accelerator_setAllocatorSettings (torch.cuda.memory._set_allocator_settings) set at run time
    (c10/core/AllocatorConfig.cpp parseArgs: `key:value` pairs split at commas outside brackets)."""
    conf = {}
    import os
    for text in [os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""), os.environ.get("PYTORCH_ALLOC_CONF", "")] + \
            getattr(me, "alloc_settings", []):
        depth, item, items = 0, "", []
        for ch in text:
            depth += (ch == "[") - (ch == "]")
            if ch == "," and depth == 0:
                items.append(item)
                item = ""
            else:
                item += ch
        items.append(item)
        for it in items:
            key, _, value = it.strip().partition(":")
            if key:
                conf[key.strip()] = value.strip()
    return conf


# settings under which the caching allocator's figures differ from the default allocator's that simdist models:
# expandable segments map 2 MiB / 20 MiB pages of one growing segment per stream (reserved figures), and the
# others change block sizes or splitting (allocated figures too)
_RESERVED_ONLY = {"expandable_segments": lambda v: v == "True", "garbage_collection_threshold": lambda v: True}
_ALL_FIGURES = {"max_split_size_mb": lambda v: True, "roundup_power2_divisions": lambda v: True,
                "backend": lambda v: v == "cudaMallocAsync"}


def _figures(device, what, reserved=True):
    """The device's allocator, for a figure `what`; refused by name under a setting whose figures simdist does not
    model (they would be the default allocator's, a wrong value)."""
    me = _rank()
    conf = _alloc_conf(me) if (getattr(me, "alloc_settings", None) or _ALLOC_ENV_SET()) else {}
    for table in ((_RESERVED_ONLY, _ALL_FIGURES) if reserved else (_ALL_FIGURES,)):
        for key, on in table.items():
            if key in conf and on(conf[key]):
                raise UnsupportedOperation(f"torch.cuda.{what} under the allocator setting {key}:{conf[key]} is not "
                                           "modelled by simdist (its figures are the default caching allocator's)")
    return me.device(device_index(device, me)).memory


def _ALLOC_ENV_SET():
    import os
    return "PYTORCH_CUDA_ALLOC_CONF" in os.environ or "PYTORCH_ALLOC_CONF" in os.environ


def _set_allocator_settings(me, text):
    """torch._C._accelerator_setAllocatorSettings(text): later settings win (AllocatorConfig::setAllocatorSettings)."""
    if not hasattr(me, "alloc_settings"):
        me.alloc_settings = []
    me.alloc_settings.append(str(text))
    for d in me.devices.values():
        d.memory.expandable = expandable_segments(me)


def expandable_segments(me):
    """Whether the caching allocator of rank `me` uses expandable segments (expandable_segments:True in
    PYTORCH_CUDA_ALLOC_CONF / PYTORCH_ALLOC_CONF, or set at run time): its large blocks then split as small ones
    (the engine allocator's `expandable`)."""
    return _alloc_conf(me).get("expandable_segments") == "True"


def memory_allocated(device=None):
    return _figures(device, "memory_allocated", reserved=False).allocated_bytes


def max_memory_allocated(device=None):
    return _figures(device, "max_memory_allocated", reserved=False).peak_bytes


def memory_reserved(device=None):
    return _figures(device, "memory_reserved").reserved_bytes


def max_memory_reserved(device=None):
    return _figures(device, "max_memory_reserved").peak_reserved_bytes


def reset_peak_memory_stats(device=None):
    m = _mem(device)
    m.peak_bytes = m.allocated_bytes
    m.peak_reserved_bytes = m.reserved_bytes
    m.stats.reset_peak()


def reset_accumulated_memory_stats(device=None):
    """The accumulated counters start again from zero (c10/cuda/CUDACachingAllocator.cpp resetAccumulatedStats:
    every Stat's allocated and freed; num_alloc_retries, num_ooms, num_sync_all_streams, num_device_alloc and
    num_device_free)."""
    m = _mem(device)
    m.num_alloc_retries = m.num_ooms = 0
    m.stats.reset_accumulated()


TOTAL_MEMORY = allocator.DEVICE_MEMORY


def _set_memory_fraction(fraction, device):
    """torch._C._cuda_setMemoryFraction, behind torch.cuda.set_per_process_memory_fraction (whose own checks run
    first): the device's segments may reserve at most fraction * total memory (CUDACachingAllocator.cpp
    setMemoryFraction: allowed_memory_maximum; alloc_block fails past it, and the allocation ends in
    OutOfMemoryError after one retry)."""
    _mem(device).set_fraction(float(fraction))


def _get_memory_fraction(device):
    """torch._C._cuda_getMemoryFraction: 1.0 until a fraction was set (getMemoryFraction)."""
    m = _mem(device)
    return 1.0 if m.fraction is None else m.limit / TOTAL_MEMORY


def _allocator_backend():
    """torch._C._cuda_getAllocatorBackend: PyTorch's native caching allocator (the one simdist models), or
    cudaMallocAsync where the allocator settings chose it (c10/cuda/CUDAAllocatorConfig.cpp parseAllocatorConfig:
    backend)."""
    me = current_rank()
    if me is not None and _alloc_conf(me).get("backend") == "cudaMallocAsync":
        return "cudaMallocAsync"
    return "native"


class _RefusedMemPool:
    """torch.cuda.MemPool (a private allocator pool, the NCCL/symmetric-memory registration path): not modelled;
    a CPU build has only torch's dummy type, whose raw error would name no reason."""

    def __new__(cls, *args, **kwargs):
        raise UnsupportedOperation("torch.cuda.MemPool (a private memory pool of the caching allocator) is not "
                                   "modelled by simdist")


def mem_get_info(device=None):
    m = _figures(device, "mem_get_info")
    return (TOTAL_MEMORY - m.reserved_bytes, TOTAL_MEMORY)


def get_device_properties(device=None):
    # the fields of torch._C._CudaDeviceProperties (torch/csrc/cuda/Module.cpp registerCudaDeviceProperties), with
    # an H200 SXM's (sm_90: 132 SMs, 2048 threads and 64 Ki registers per SM, 227 KiB opt-in shared memory per
    # block, 50 MiB L2, a 6144-bit HBM3e bus); code sizes its grids and blocks from them
    me = _rank()
    me.cuda_initialized = True  # (get_device_properties calls _lazy_init first)
    idx = device_index(device, me) if device is not None else me.current_device
    if not 0 <= idx < me.world.device_count:
        raise AssertionError("Invalid device id")  # torch/cuda/__init__.py get_device_properties (an H200 too)
    return SimpleNamespace(name="NVIDIA H200 (simdist)", major=9, minor=0, total_memory=TOTAL_MEMORY,
                           multi_processor_count=132, is_integrated=False, is_multi_gpu_board=False,
                           max_threads_per_multi_processor=2048, max_threads_per_block=1024, warp_size=32,
                           regs_per_multiprocessor=65536, shared_memory_per_block=48 * 1024,
                           shared_memory_per_block_optin=227 * 1024, shared_memory_per_multiprocessor=228 * 1024,
                           L2_cache_size=50 * (1 << 20), clock_rate=1980000, memory_clock_rate=3201000,
                           memory_bus_width=6144, pci_bus_id=0x18 + idx, pci_device_id=0, pci_domain_id=0,
                           gcnArchName="", uuid=f"simdist-{idx}")


def get_device_name(device=None):
    return get_device_properties(device).name


def get_device_capability(device=None):
    get_device_properties(device)  # torch reads the properties: an index past device_count() is refused
    return (9, 0)


# the architectures of a CUDA 12.8 build of torch (TORCH_CUDA_ARCH_LIST of the cu128 wheels: Turing to Blackwell);
# libraries check that the device's sm_90 is among them before taking a fused path. The CPU build gives [].
ARCH_LIST = ("sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120")


def get_arch_list():
    return list(ARCH_LIST)


def _current_raw_stream(device_index):
    """torch._C._cuda_getCurrentRawStream(device_index): the current stream's cudaStream_t as an int (Triton and
    inductor's generated launchers pass it to kernels): the simulated stream's `cuda_stream`, which
    torch.cuda.ExternalStream / Stream(stream_ptr=...) lookups of simdist resolve back."""
    return current_stream(device_index).cuda_stream


def is_bf16_supported(including_emulation=True):
    return True


def _pending_seeds(me):
    p = getattr(me, "pending_cuda_seeds", None)
    if p is None:
        p = me.pending_cuda_seeds = {}
    return p


def manual_seed(seed):
    """torch.cuda.manual_seed: seeds the current device's generator, without initializing CUDA: before the
    rank's first CUDA call it is queued and applied when the device is made (torch/cuda/random.py `_lazy_call`),
    so seeding does not make `is_initialized()` true (DeviceMesh then picks the device from LOCAL_RANK)."""
    me = current_rank()
    if me is None:
        return
    if not me.devices:
        _pending_seeds(me)[me.current_device] = int(seed)
        return
    me.device().generator.manual_seed(int(seed))


def _gen(device=None):
    me = _rank()
    return me.device(device_index(device if device != "cuda" else None, me)).generator


def get_rng_state(device="cuda"):
    """The device's default generator state as CUDA's: 16 bytes, (seed, offset) of its Philox stream
    (aten/src/ATen/cuda/CUDAGeneratorImpl.cpp get_state). DTensor's RNG tracker reads and rewrites the offset in
    place (torch/distributed/tensor/_random.py _PhiloxState: exactly one int64 after the seed). Ops on the default
    generator draw from (seed, offset) alone (simdist/faces/rng.py launch_seed), so nothing else is needed."""
    return _gen(device).get_state()[:16]


def set_rng_state(new_state, device="cuda"):
    _gen(device).set_state(new_state)


def get_rng_state_all():
    me = _rank()
    return [me.device(i).generator.get_state()[:16] for i in range(me.world.device_count)]


def set_rng_state_all(new_states):
    for i, st in enumerate(new_states):
        set_rng_state(st, i)


def initial_seed():
    return _gen().initial_seed()


def seed():
    _gen().seed()


def seed_all():
    import random as _random
    s = _random.getrandbits(63)
    for i in range(_rank().world.device_count):
        _rank().device(i).generator.manual_seed(s)


class _DefaultGenerators:
    """torch.cuda.default_generators: the current rank's simulated device generators."""

    def __getitem__(self, i):
        me = _rank()
        return me.device(range(me.world.device_count)[i]).generator

    def __len__(self):
        return _rank().world.device_count

    def __iter__(self):
        return (self[i] for i in range(len(self)))


def memory_stats(device=None):
    """torch.cuda.memory_stats(): every key of the native caching allocator's DeviceStats, sorted as
    torch/cuda/memory.py sorts them (families allocation, segment, active, inactive_split and their _bytes, plus
    requested_bytes, each for all / small_pool / large_pool and current / peak / allocated / freed; the counters;
    max_split_size -1 (SIZE_MAX: no max_split_size_mb); oversize_* 0, as without max_split_size_mb), the figures
    engine/allocator.py AllocatorStats keeps as CUDACachingAllocator.cpp does. Measured equal, key for key, on an
    H200 after a scripted sequence (ci/gpu_x_facts2.py; notes x11)."""
    m = _figures(device, "memory_stats")
    st = m.stats
    out = {}
    for family in allocator.STAT_FAMILIES:
        for pool, (cur, peak, alloc, freed) in zip(allocator.STAT_POOLS, st.stat[family]):
            out[f"{family}.{pool}.current"] = cur
            out[f"{family}.{pool}.peak"] = peak
            out[f"{family}.{pool}.allocated"] = alloc
            out[f"{family}.{pool}.freed"] = freed
    for what in ("oversize_allocations", "oversize_segments"):
        for k in ("current", "peak", "allocated", "freed"):
            out[f"{what}.{k}"] = 0
    out.update(num_alloc_retries=m.num_alloc_retries, num_ooms=m.num_ooms, num_sync_all_streams=st.num_sync_all_streams,
               num_device_alloc=st.num_device_alloc, num_device_free=st.num_device_free, max_split_size=-1)
    return collections.OrderedDict(sorted(out.items()))


def _memory_stats_nested(device=None):
    """torch._C._cuda_memoryStats: memory_stats' keys as nested dicts (torch/cuda/memory.py memory_stats_as_nested_dict
    returns it; memory_stats flattens it with '.')."""
    out = {}
    for key, value in memory_stats(device).items():
        d = out
        *path, last = key.split(".")
        for part in path:
            d = d.setdefault(part, {})
        d[last] = value
    return out


def memory_summary(device=None, abbreviated=False):
    st = memory_stats(device)
    return "\n".join(f"{k}: {v}" for k, v in st.items())


def manual_seed_all(seed):
    """Every device's generator; for devices not made yet, queued (torch/cuda/random.py `_lazy_call(seed_all=True)`):
    seeding does not initialize CUDA."""
    me = current_rank()
    if me is None:
        return
    pending = _pending_seeds(me)
    pending.clear()
    pending["all"] = int(seed)
    for d in me.devices.values():
        d.generator.manual_seed(int(seed))


def _noop(*a, **k):
    return None


def _true(*a, **k):
    return True


@contextlib.contextmanager
def _nvtx_range(*a, **k):
    yield


nvtx = SimpleNamespace(range_push=lambda *a, **k: 0, range_pop=lambda *a, **k: 0, mark=_noop, range=_nvtx_range,
                       range_start=lambda *a, **k: 0, range_end=_noop)


def is_current_stream_capturing():
    """False: no CUDA graph capture is ever underway in a simulated rank (simdist refuses capture by name)."""
    return False


def _refused(what, why="is not modelled by simdist"):
    def refuse(*args, **kwargs):
        raise UnsupportedOperation(f"{what} {why}")
    refuse.__name__ = what.split("(")[0].strip().rsplit(".", 1)[-1]
    return refuse


class _CudaError(int):
    """torch.cuda.cudart().cudaError: pybind's enum of cudaError_t, of which torch binds only `success`
    (torch/csrc/cuda/shared/cudart.cpp); the functions return error codes as its values."""
    _names = {0: "success", 712: "cudaErrorHostMemoryAlreadyRegistered", 713: "cudaErrorHostMemoryNotRegistered"}

    @property
    def value(self):
        return int(self)

    @property
    def name(self):
        return self._names.get(int(self), str(int(self)))

    def __repr__(self):
        return f"<cudaError.{self.name}: {int(self)}>"


_CUDA_ERROR_STRINGS = {0: "no error", 712: "part or all of the requested memory range is already mapped",
                       713: "pointer does not correspond to a registered memory region"}


class _Cudart:
    """torch.cuda.cudart() during a run: the libcudart bindings torch exposes (torch/csrc/cuda/shared/cudart.cpp
    initCudartBindings). cudaHostRegister / cudaHostUnregister page-lock a host range for the rank (its CPU tensors
    there are pinned: torch.distributed.checkpoint's stager pins its staging storages so, torch/cuda/
    _pin_memory_utils.py); cudaProfilerStart / Stop have no profiler to start and return success; cudaMemGetInfo
    answers as torch.cuda.mem_get_info; cudaGetErrorString names the codes these return. Raw stream handles
    (cudaStreamCreate / cudaStreamDestroy) are refused by name."""

    class cudaError:
        success = _CudaError(0)

    @staticmethod
    def cudaGetErrorString(error):
        return _CUDA_ERROR_STRINGS.get(int(error), "unrecognized error code")

    @staticmethod
    def cudaProfilerStart():
        _rank()
        return _CudaError(0)

    @staticmethod
    def cudaProfilerStop():
        _rank()
        return _CudaError(0)

    @staticmethod
    def cudaHostRegister(ptr, size, flags):
        return _CudaError(_rank().host_memory.host_register(int(ptr), int(size)))

    @staticmethod
    def cudaHostUnregister(ptr):
        return _CudaError(_rank().host_memory.host_unregister(int(ptr)))

    @staticmethod
    def cudaMemGetInfo(device):
        return mem_get_info(device)

    cudaStreamCreate = staticmethod(_refused("torch.cuda.cudart().cudaStreamCreate (a raw cudaStream_t)"))
    cudaStreamDestroy = staticmethod(_refused("torch.cuda.cudart().cudaStreamDestroy (a raw cudaStream_t)"))


_CUDART = _Cudart()


def cudart():
    """torch.cuda.cudart(): initializes CUDA (torch/cuda/__init__.py: _lazy_init()) and returns the bindings."""
    lazy_init()
    return _CUDART


class ExternalStream:
    """torch.cuda.ExternalStream(stream_ptr): a cudaStream_t made outside torch; a simulated world has none."""

    def __new__(cls, *args, **kwargs):
        raise UnsupportedOperation("torch.cuda.ExternalStream (a CUDA stream made outside torch, from a raw "
                                   "cudaStream_t) is not modelled by simdist")


def get_sync_debug_mode():
    return sync_debug.mode(_rank())


def set_sync_debug_mode(debug_mode):
    sync_debug.set_mode(_rank(), debug_mode)


_MEMORY_REFUSED = {
    "_record_memory_history": "torch.cuda.memory._record_memory_history (allocator history and stack traces)",
    "_snapshot": "torch.cuda.memory._snapshot (the allocator's segment and trace snapshot)",
    "_dump_snapshot": "torch.cuda.memory._dump_snapshot",
    "memory_snapshot": "torch.cuda.memory_snapshot (the allocator's segments)",
    "caching_allocator_alloc": "torch.cuda.caching_allocator_alloc (raw device pointers)",
    "caching_allocator_delete": "torch.cuda.caching_allocator_delete (raw device pointers)",
    "change_current_allocator": "torch.cuda.memory.change_current_allocator (a custom allocator)",
    "_get_current_allocator": "torch.cuda.memory._get_current_allocator (the C++ allocator object)",
    "use_mem_pool": "torch.cuda.use_mem_pool (a private memory pool of the caching allocator)",
    "host_memory_stats": "torch.cuda.host_memory_stats (the pinned host allocator's statistics)",
    "host_memory_stats_as_nested_dict": "torch.cuda.host_memory_stats_as_nested_dict (the pinned host allocator)",
    "reset_peak_host_memory_stats": "torch.cuda.reset_peak_host_memory_stats (the pinned host allocator)",
    "reset_accumulated_host_memory_stats": "torch.cuda.reset_accumulated_host_memory_stats (the pinned host "
                                           "allocator)",
}


class _CufftPlanCacheProp:
    """torch.backends.cuda.cufft_plan_cache[i].size / .max_size on a simulated device (cuda.rst "cuFFT plan
    cache"; aten/src/ATen/native/cuda/CuFFTPlanCache.h CuFFTParamsLRUCache). max_size is a per-rank, per-device
    setting, CUFFT_DEFAULT_CACHE_SIZE (4096) until set, checked as _set_max_size does (the CPU build raised its
    "Cannot access cuFFT plan cache without ATen_cuda library" RuntimeError, which names no reason); size, the
    number of cuFFT plans cached (one per distinct CuFFTParams of the transforms run), is not modelled."""

    def __init__(self, name):
        self.name = name

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        me = _rank()
        if self.name == "size":
            raise UnsupportedOperation("torch.backends.cuda.cufft_plan_cache.size (the number of cuFFT plans cached) "
                                       "is not modelled by simdist")
        return getattr(me, "cufft_max_size", {}).get(obj.device_index, CUFFT_DEFAULT_CACHE_SIZE)

    def __set__(self, obj, value):
        me = _rank()
        if self.name == "size":
            raise RuntimeError(".size is a read-only property showing the number of plans currently in the cache. "
                               "To change the cache capacity, set cufft_plan_cache.max_size.")
        value = int(value)
        if value < 0:
            raise RuntimeError(f"cuFFT plan cache size must be non-negative, but got {value}")
        if not hasattr(me, "cufft_max_size"):
            me.cufft_max_size = {}
        me.cufft_max_size[obj.device_index] = value


CUFFT_DEFAULT_CACHE_SIZE = 4096  # CuFFTPlanCache.h, CUDA >= 10 (CUFFT_MAX_PLAN_NUM is then SIZE_MAX)


def _cufft_clear(self):
    _rank()  # the plans are freed; nothing simdist keeps


def _cufft_cache_of(self, device):
    """cuFFTPlanCacheManager.__getitem__ against the simulated device count (torch's keeps a list made at its first
    use, with that run's count)."""
    index = torch.cuda._utils._get_device_index(device)
    if index < 0 or index >= device_count():
        raise RuntimeError(f"cufft_plan_cache: expected 0 <= device index < {device_count()}, but got device with "
                           f"index {index}")
    return torch.backends.cuda.cuFFTPlanCache(index)


def _cufft_patches():
    b = torch.backends.cuda
    return [(b.cuFFTPlanCache, "size", _CufftPlanCacheProp("size")),
            (b.cuFFTPlanCache, "max_size", _CufftPlanCacheProp("max_size")),
            (b.cuFFTPlanCache, "clear", _cufft_clear),
            (b.cuFFTPlanCacheManager, "__getitem__", _cufft_cache_of)]


_orig_cudnn_is_acceptable = torch.backends.cudnn.is_acceptable


def _cudnn_is_acceptable(tensor):
    """simdist models no cuDNN: a simulated tensor is never cuDNN's (recurrent layers then take ATen's fused cells,
    simdist/faces/rules/rnn_cells.py, as a GPU does with cuDNN disabled), without the CPU build's warning that
    torch lacks cuDNN at every nn.LSTM/GRU call (torch/backends/cudnn/__init__.py is_acceptable)."""
    if current_rank() is not None and getattr(tensor, "is_cuda", False):
        return False
    return _orig_cudnn_is_acceptable(tensor)


def cuda_patches():
    """(owner, attribute, replacement) for everything torch.cuda exposes that simdist fakes."""
    c = torch.cuda
    items = dict(
        is_available=is_available, device_count=device_count, current_device=current_device,
        set_device=set_device, device=device, device_of=device_of, Stream=Stream, Event=Event,
        current_stream=current_stream, default_stream=default_stream, set_stream=set_stream, stream=stream,
        StreamContext=StreamContext, synchronize=synchronize, _sleep=_sleep, empty_cache=empty_cache,
        memory_allocated=memory_allocated, max_memory_allocated=max_memory_allocated,
        memory_reserved=memory_reserved, max_memory_reserved=max_memory_reserved,
        reset_peak_memory_stats=reset_peak_memory_stats, mem_get_info=mem_get_info,
        get_device_properties=get_device_properties, get_device_name=get_device_name,
        get_device_capability=get_device_capability, is_bf16_supported=is_bf16_supported,
        manual_seed=manual_seed, manual_seed_all=manual_seed_all, _lazy_init=lazy_init, init=lazy_init,
        is_initialized=is_initialized, cudart=cudart, ipc_collect=_noop, get_rng_state=get_rng_state, set_rng_state=set_rng_state,
        get_rng_state_all=get_rng_state_all, set_rng_state_all=set_rng_state_all, initial_seed=initial_seed,
        seed=seed, seed_all=seed_all, default_generators=_DefaultGenerators(), memory_stats=memory_stats,
        memory_summary=memory_summary, reset_accumulated_memory_stats=reset_accumulated_memory_stats,
        is_current_stream_capturing=is_current_stream_capturing, ExternalStream=ExternalStream,
        get_sync_debug_mode=get_sync_debug_mode, set_sync_debug_mode=set_sync_debug_mode,
        check_error=_check_error,  # (torch/cuda/profiler.py binds it at import: the alias scan swaps it there too)
        get_arch_list=get_arch_list,
        _exchange_device=_exchange_device, _maybe_exchange_device=_exchange_device,
        _set_stream_by_id=_set_stream_by_id,
        **{n: _refused(f"torch.cuda.{n} (an NVML query of the physical GPU: nvidia-smi's figures)")
           for n in _NVML_QUERIES if hasattr(c, n)},
        graph_pool_handle=_refused("torch.cuda.graph_pool_handle (CUDA graphs)"),
        current_blas_handle=_refused("torch.cuda.current_blas_handle (a raw cuBLAS handle)"),
    )
    for name, what in _MEMORY_REFUSED.items():
        if name in c.__dict__:
            items[name] = _refused(what)
    out = [(c, k, v) for k, v in items.items()]
    out += _submodule_aliases(items)
    out.append((torch.backends.cudnn, "is_acceptable", _cudnn_is_acceptable))
    out += _cufft_patches()
    # a CUDA build has cuDNN: is_available() True and version() its number (None on the CPU build broke code
    # that compares it: `cudnn.version() >= 8000` is a TypeError); the kernels simdist runs stay its own
    out += [(torch.backends.cudnn, "is_available", _true), (torch.backends.cudnn, "version", _cudnn_version),
            (torch._C, "_cuda_canDeviceAccessPeer", _can_device_access_peer)]
    # a CUDA build's is_built() (torch._C._has_cuda): libraries gate CUDA paths on it; the rest of torch.cuda's
    # surface that a CPU build lacks is modelled or refused by name, never a raw AttributeError
    out += [(torch.backends.cuda, "is_built", _true),
            (torch._C, "_cuda_cudaCachingAllocator_enable", _caching_allocator_enable),
            (torch._C, "_cuda_cudaCachingAllocator_is_enabled", _true),
            (torch._C, "_cuda_getCurrentRawStream", _current_raw_stream),
            (c, "get_stream_from_external", _refused("torch.cuda.get_stream_from_external (a CUDA stream made "
                                                     "outside torch, from a raw cudaStream_t)")),
            (c, "current_solver_handle", _refused("torch.cuda.current_solver_handle (a raw cuSOLVER handle)"))]
    out += [(torch._C, binding, _tunableop(name)) for binding, name in _tunableop_bindings()]
    import torch.cuda.jiterator as _jiterator
    out += [(_jiterator, n, _refused(f"torch.cuda.jiterator.{n} (a CUDA kernel compiled from C++ source)"))
            for n in ("_create_jit_fn", "_create_multi_output_jit_fn") if hasattr(_jiterator, n)]
    # CUDA has been initialized in a simulated rank: torch.utils.checkpoint saves and restores the device RNG
    # states only when `torch.cuda._initialized` (checkpoint.py: had_device_in_fwd), else its recomputation
    # draws new dropout masks
    out.append((c, "_initialized", True))
    out += [(c.nvtx, k, getattr(nvtx, k)) for k in ("range_push", "range_pop", "mark", "range", "range_start",
                                                    "range_end")]
    import torch.cuda.memory as _memory
    out += [(_memory, name, _refused(what)) for name, what in _MEMORY_REFUSED.items()
            if hasattr(_memory, name) and name not in items]
    out += _accelerator_memory_patches()
    out += [(torch._C, "_cuda_setMemoryFraction", _set_memory_fraction),
            (torch._C, "_cuda_getMemoryFraction", _get_memory_fraction),
            (torch._C, "_cuda_getAllocatorBackend", _allocator_backend),
            (torch._C, "_cuda_memoryStats", _memory_stats_nested),
            (c, "MemPool", _RefusedMemPool), (_memory, "MemPool", _RefusedMemPool)]
    import torch.cuda.nccl as _nccl
    out.append((_nccl, "version", nccl_version))
    # a CUDA build's torch.version.cuda (None on the CPU build): libraries gate GPU paths on it (torch DDP's
    # bf16_compress_hook refused to register, a raw TypeError, with None)
    out.append((torch.version, "cuda", CUDA_VERSION))
    from .legacy_types import legacy_type_patches
    out += legacy_type_patches()  # torch.cuda.FloatTensor & co., Tensor.type(T), set_default_tensor_type
    return out


_ALIAS_MODULES = [None, []]  # [sys.modules' size and newest name when scanned, (module, name) candidates then]


def _alias_candidates(names):
    """(module dict, name) for every loaded module, simdist's own and torch.cuda itself aside, that has a global of
    one of `names`. Scanning sys.modules (thousands of modules) costs milliseconds; it is rescanned only when a
    module was imported or removed since (its size or newest name changed)."""
    import sys
    mods = sys.modules
    stamp = (len(mods), next(reversed(mods), None))
    if _ALIAS_MODULES[0] != stamp:
        found = []
        for name, m in list(mods.items()):
            d = getattr(m, "__dict__", None)
            if m is None or m is torch.cuda or not isinstance(d, dict) or name.startswith("simdist"):
                continue
            found.extend((m, k) for k in d.keys() & names)
        _ALIAS_MODULES[:] = [stamp, found]
    return _ALIAS_MODULES[1]


def _submodule_aliases(items):
    """The same functions where modules bound them at import, before the run: torch.cuda's own (torch/cuda/
    random.py does `from . import current_device`) and any library's (Megatron-Core's tensor_parallel/random.py
    `from torch.cuda import _lazy_init`, whose original raises "Torch not compiled with CUDA enabled" on a CPU
    build). Only a global that is still torch.cuda's original is swapped (a library's own function of the same
    name is left alone), and it is restored after the run with everything else."""
    c = torch.cuda.__dict__
    out = []
    for mod, k in _alias_candidates(items.keys()):
        orig = c.get(k)
        if orig is not None and mod.__dict__.get(k) is orig:
            out.append((mod, k, items[k]))
    return out


CUDA_VERSION = "12.8"  # the CUDA of torch 2.8's default wheel (download.pytorch.org/whl/cu128)
CUDNN_VERSION = 91900  # torch.backends.cudnn.version() on the reference H200, torch 2.11 (docs/gpu/sdp-choice-*.json)


def _true():
    return True


def _cudnn_version():
    return CUDNN_VERSION


def _caching_allocator_enable(value=True):
    """torch._C._cuda_cudaCachingAllocator_enable, behind torch.cuda.memory.caching_allocator_enable(value) and
    caching_allocator_disabled() (torch/cuda/memory.py): True keeps the caching allocator (simdist's only one);
    False makes every later allocation a cudaMalloc and every free a cudaFree, which waits for the device
    (c10/cuda/CUDACachingAllocator.cpp, as PYTORCH_NO_CUDA_MEMORY_CACHING, notes c8): not modelled, refused by
    name (the CPU build raised a raw AttributeError for both)."""
    _rank()
    if not value:
        raise UnsupportedOperation(
            "torch.cuda.memory.caching_allocator_enable(False) / caching_allocator_disabled() (the uncached "
            "allocator: a cudaMalloc per tensor, a cudaFree that synchronizes the device at every free) is not "
            "modelled by simdist")


def _tunableop(name):
    """torch.cuda.tunable's bindings (torch/cuda/tunable.py -> torch._C._cuda_tunableop_*): TunableOp is off
    unless enabled (aten/src/ATen/cuda/tunable/Tunable.cpp TuningContext), and with it on a GEMM's implementation
    is chosen by timing candidates on the device, which simdist does not model: is_enabled() answers False and
    enable(False) is accepted; enable(True) and every other setting or query are refused by name (the CPU build
    raised a raw AttributeError)."""
    if name == "is_enabled":
        return lambda: False

    def call(*args, **kwargs):
        if name == "enable" and not (args[0] if args else kwargs.get("val", True)):
            return None
        raise UnsupportedOperation(f"torch.cuda.tunable.{name} (TunableOp: GEMM implementations chosen by timing "
                                   f"on the device) is not modelled by simdist")
    call.__name__ = name
    return call


def _tunableop_bindings():
    """(torch._C name, tunable function name) of every binding torch/cuda/tunable.py calls, read from its source so
    that the torch version at hand is covered (2.11 and 2.13 differ)."""
    import inspect
    import re
    import torch.cuda.tunable as tunable
    try:
        src = inspect.getsource(tunable)
    except OSError:  # no source (a frozen build): nothing to patch, torch's own errors stand
        return []
    names = sorted(set(re.findall(r"torch\._C\.(_cuda_(?:tunableop|record_untuned)_\w+)", src)))
    return [(n, n[len("_cuda_tunableop_"):] if n.startswith("_cuda_tunableop_") else n[len("_cuda_"):])
            for n in names]


def _check_error(res):
    """torch.cuda.check_error(res): raises torch.cuda.CudaError(res) unless res is cudaSuccess (torch/cuda/
    __init__.py); the CPU build's module has no cudart bindings (`_cudart` None: a raw AttributeError)."""
    if int(res) != 0:
        e = torch.cuda.CudaError.__new__(torch.cuda.CudaError)
        RuntimeError.__init__(e, f"{_CUDA_ERROR_STRINGS.get(int(res), 'unrecognized error code')} ({int(res)})")
        raise e


def _can_device_access_peer(device, peer):
    """cudaDeviceCanAccessPeer on one host's H200s (NVLink): every other device, never the device itself
    (torch.cuda.can_device_access_peer has checked both indices already)."""
    return device != peer


def _accelerator_memory_patches():
    """torch.accelerator.memory's functions (torch 2.8+) read the device allocator through torch._C, which a CPU
    build has none of for CUDA: the same figures as torch.cuda's (torch/accelerator/memory.py reads every one of
    them from memory_stats)."""
    acc = getattr(torch, "accelerator", None)
    mod = getattr(acc, "memory", None) if acc is not None else None
    if mod is None:
        return []
    faces = dict(empty_cache=empty_cache, memory_stats=memory_stats, reset_peak_memory_stats=reset_peak_memory_stats,
                 reset_accumulated_memory_stats=reset_accumulated_memory_stats,
                 get_memory_info=lambda device_index=None: mem_get_info(device_index))
    out = []
    for name, fn in faces.items():
        orig = getattr(mod, name, None)
        if orig is None:
            continue
        out.append((mod, name, fn))
        if acc.__dict__.get(name) is orig:
            out.append((acc, name, fn))
    return out


def nccl_version():
    """The NCCL release that ships with the torch whose semantics the run models (torch 2.7: 2.26, 2.8+: 2.27)."""
    me = current_rank()
    prof = me.world.nccl_profile if me is not None else "2.8"
    return (2, 26, 2) if prof == "2.7" else (2, 27, 5)
