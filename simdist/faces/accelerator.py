"""torch.accelerator's device and stream calls, and the generic torch.Event, inside a simulated rank: the same
simulated devices, streams and events as torch.cuda's.

On a CUDA machine torch.accelerator.current_stream(i) is device i's current CUDA stream, equal to
torch.cuda.current_stream(i) (a torch.cuda.Stream is a torch.Stream), set_device_index / device_index switch
torch.cuda's current device, and torch.Event records on and waits into any of those streams
(torch/accelerator/__init__.py over torch/csrc/DeviceAccelerator.cpp: c10::impl::VirtualGuardImpl of the CUDA
backend). A CPU build answers these through simdist's fake guard only: the stream came back as a torch.Stream of
id 0 that no simulated object accepted (wait_stream raised "Unknown device", torch.cuda.Event.wait raised
AttributeError), it compared unequal to the side stream it stood for, and device_index(1) left torch.cuda on
device 0. Outside a rank everything is torch's own.
"""
from __future__ import annotations

import torch

from ..engine import streams as engine_streams
from ..engine.context import current_rank, live_ranks, process_rank
from ..engine.errors import UnsupportedOperation
from . import cuda as _cuda
from .cuda import sim_stream


def _in_rank(orig, fn, foreign):
    def call(*args, **kwargs):
        me = current_rank()
        if me is None:
            if live_ranks():  # a host thread the program started (DataLoader's pin-memory thread)
                return foreign(*args, **kwargs)
            return orig(*args, **kwargs)
        return fn(me, *args, **kwargs)
    call.__name__ = getattr(orig, "__name__", fn.__name__)
    return call


def _get_device_index(me):
    return me.current_device


def _set_device_index(me, index):
    _cuda.set_device(int(index))


def _exchange_device(me, index):
    """c10::impl exchangeDevice: the previous index; a negative index switches nothing."""
    prev = me.current_device
    if index >= 0 and index != prev:
        _cuda.set_device(int(index))
    return prev


class AcceleratorStream(torch.Stream):
    """What torch.accelerator.current_stream() returns on a CUDA machine: a generic torch.Stream carrying the
    current CUDA stream's (stream_id, device_index, device_type), not the torch.cuda.Stream object. Measured on an
    H200 (torch 2.11): it equals another torch.Stream of the same stream, but neither `acc == cuda_stream` nor
    `cuda_stream == acc` (torch.cuda.Stream.__eq__ refuses a non-CUDA Stream, and as the subclass it is asked
    first), and the hashes differ; torch.cuda's and torch.accelerator's calls take it where they take a stream
    (torch.cuda.set_stream reads its id triple). Its methods act on the simulated stream it names."""

    def __new__(cls, sim):
        # (the C++ c10::Stream inside carries simdist's own id, which the fake guard maps back when torch's C++
        # takes this object; Python reads the id a GPU gives, below)
        obj = super().__new__(cls, stream_id=sim.id, device_index=sim.dev.index, device_type=1)
        obj._sim = sim
        return obj

    @property
    def stream_id(self):
        """The stream's StreamId on a GPU (faces/cuda.py gpu_stream_id): 0 for a default stream."""
        return _cuda.gpu_stream_id(self._sim)

    def __ne__(self, other):
        if isinstance(other, engine_streams.Stream):  # as torch.Stream's C++ comparison: by the id triple
            return other.__ne__(self)
        return super().__ne__(other)

    __hash__ = torch.Stream.__hash__

    def wait_event(self, event):
        """torch.Stream.wait_event reads its argument as a torch.Event (torch/csrc/Stream.cpp THPStream_wait_event:
        `reinterpret_cast<THPEvent*>`, no type check). A torch.cuda.Event is one by inheritance (THCPEvent :
        THPEvent) with a CUDA event of its own: the generic stream waits the torch.Event part, which only a generic
        stream's record_event(event) records (below); torch.cuda.Event.record never does, and a wait on a
        never-recorded event returns at once (c10 InlineEvent::block). So a generic stream's wait on a
        torch.cuda.Event recorded the torch.cuda way orders nothing: on an H200 (torch 2.11) 28 of 30 delayed runs
        read the producer's output early (notes L8, ci/gpu_stream_event_pairs.py)."""
        if isinstance(event, _cuda.Event) and not isinstance(event, Event):
            generic = getattr(event, "_generic_part", None)
            if generic is not None:
                self._sim.wait_event(generic)
            return
        self._sim.wait_event(event)

    def wait_stream(self, stream):
        self._sim.wait_stream(sim_stream(current_rank(), stream))

    def record_event(self, event=None):
        """torch.Stream.record_event (Stream.cpp THPStream_record_event): a new torch.Event when none is given;
        given a torch.cuda.Event, it records the event's torch.Event part, which torch.cuda's own wait, query and
        synchronize never look at (they use its CUDA event), while a generic stream's wait_event does."""
        if event is None:
            event = Event()
        elif isinstance(event, _cuda.Event) and not isinstance(event, Event):
            part = getattr(event, "_generic_part", None)
            if part is None:
                part = event._generic_part = Event()
            part.record(self._sim)
            return event
        event.record(self._sim)
        return event

    def query(self):
        return self._sim.query()

    def synchronize(self):
        self._sim.synchronize()

    def __enter__(self):  # `with stream:` (parallel_apply): current on its device, as torch.Stream's context does
        self._sim.__enter__()
        return self

    def __exit__(self, *exc):
        return self._sim.__exit__(*exc)

    def __repr__(self):
        return f"torch.Stream(device_type=cuda, device_index={self.device_index}, stream_id={self.stream_id}) [simdist]"


def _get_stream(me, index):
    return AcceleratorStream(_cuda.current_stream(index))


def _set_stream(me, stream):
    _cuda.set_stream(sim_stream(me, stream))


def _synchronize_device(me, index):
    _cuda.synchronize(index)


class Event(_cuda.Event):
    """torch.Event(device=None, *, enable_timing=False, blocking=False, interprocess=False) of the CUDA device:
    simdist's CUDA event (record, wait, query, synchronize, elapsed_time), taking simulated streams and the
    torch.Stream objects of the fake guard."""

    def __init__(self, device=None, *, enable_timing=False, blocking=False, interprocess=False):
        me = current_rank()
        dev = torch.device(device) if device is not None else torch.device("cuda")
        if dev.type != "cuda":
            raise UnsupportedOperation(f"torch.Event(device={device!r}) inside a simulated rank (only CUDA events "
                                       "are modelled by simdist)")
        super().__init__(enable_timing=enable_timing, blocking=blocking, interprocess=interprocess)
        self._device = torch.device("cuda", dev.index if dev.index is not None else me.current_device)

    @property
    def device(self):
        return self._device

    def record(self, stream=None):
        super().record(sim_stream(current_rank(), stream))

    def wait(self, stream=None):
        super().wait(sim_stream(current_rank(), stream))

    def __repr__(self):
        return f"torch.Event device_type=cuda, device_index={self._device.index} [simdist]"


class _EventClass(type):
    """torch.Event while a run is installed: inside a rank simdist's Event, outside it torch's own; isinstance
    accepts both."""

    def __call__(cls, *args, **kwargs):
        if current_rank() is None:
            return _TORCH_EVENT(*args, **kwargs)
        return Event(*args, **kwargs)

    def __instancecheck__(cls, obj):
        return isinstance(obj, (_TORCH_EVENT, Event))


_TORCH_EVENT = torch.Event


class TorchEvent(metaclass=_EventClass):
    pass


class _StreamClass(type):
    """torch.Stream while a run is installed. Inside a rank, `torch.Stream(device="cuda", priority=0)` makes a new
    simulated stream (c10's getNewStream: a stream of the device's pool, as torch.cuda.Stream() takes one) and
    `torch.Stream(stream_id=, device_index=, device_type=)` names an existing one; both are the generic torch.Stream
    torch.accelerator hands out (AcceleratorStream). torch's own C++ torch.Stream would take simdist's Python
    events for torch.Events (Stream.cpp casts its argument unchecked: an arbitrary device type, or a crash).
    Outside a rank torch's own. isinstance / issubclass also accept torch.cuda.Stream, a torch.Stream subclass on
    a CUDA build."""

    def __call__(cls, *args, **kwargs):
        me = current_rank()
        if me is None:
            return _TORCH_STREAM(*args, **kwargs)
        device = args[0] if args else kwargs.pop("device", None)
        priority = kwargs.pop("priority", 0)
        if "stream_id" in kwargs:
            if kwargs.get("device_type", 1) != 1:
                raise UnsupportedOperation(f"torch.Stream(device_type={kwargs.get('device_type')}) inside a simulated "
                                           "rank (only CUDA streams are modelled by simdist)")
            index = kwargs.get("device_index", me.current_device)
            return AcceleratorStream(_cuda._existing_stream(me, kwargs["stream_id"], index))
        dev = torch.device(device) if device is not None else torch.device("cuda", me.current_device)
        if dev.type != "cuda":
            raise UnsupportedOperation(f"torch.Stream(device={device!r}) inside a simulated rank (only CUDA streams "
                                       "are modelled by simdist)")
        index = dev.index if dev.index is not None else me.current_device
        return AcceleratorStream(me.device(index).new_stream(priority))

    def __instancecheck__(cls, obj):
        return isinstance(obj, (_TORCH_STREAM, engine_streams.Stream))

    def __subclasscheck__(cls, sub):
        return issubclass(sub, (_TORCH_STREAM, engine_streams.Stream))


_TORCH_STREAM = torch.Stream


class TorchStream(metaclass=_StreamClass):
    pass


def _foreign_device_index():
    me = process_rank()
    if me is None:
        raise UnsupportedOperation("torch.accelerator in a host thread the program started, with several simulated "
                                   "ranks in this process: which rank's device it is is not modelled by simdist")
    return me.current_device


def _foreign_refused(what):
    def refuse(*args, **kwargs):
        raise UnsupportedOperation(f"torch.accelerator.{what} in a host thread the program started (not a simulated "
                                   "rank's thread) is not modelled by simdist")
    return refuse


def accelerator_patches():
    """A host thread the program started (not a rank's) may set its own current device, as DataLoader's pin-memory
    thread does first (torch/utils/data/_utils/pin_memory.py: torch.accelerator.set_device_index(device_id)): a
    thread-local setting of a thread that launches no device work, so nothing to simulate; its streams are
    refused by name."""
    C = torch._C
    fns = {"_accelerator_getDeviceIndex": (_get_device_index, _foreign_device_index),
           "_accelerator_setDeviceIndex": (_set_device_index, lambda index: None),
           "_accelerator_exchangeDevice": (_exchange_device, lambda index: _foreign_device_index()),
           "_accelerator_maybeExchangeDevice": (_exchange_device, lambda index: _foreign_device_index()),
           "_accelerator_getStream": (_get_stream, _foreign_refused("current_stream")),
           "_accelerator_setStream": (_set_stream, _foreign_refused("set_stream")),
           "_accelerator_synchronizeDevice": (_synchronize_device, _foreign_refused("synchronize")),
           "_accelerator_setAllocatorSettings": (_cuda._set_allocator_settings,
                                                 _foreign_refused("_set_allocator_settings"))}
    out = [(C, name, _in_rank(getattr(C, name), fn, foreign)) for name, (fn, foreign) in fns.items()
           if hasattr(C, name)]
    out.append((torch, "Event", TorchEvent))
    out.append((torch, "Stream", TorchStream))
    return out
