"""``torch.cuda`` for the fakes, with CPU stand-ins when no CUDA device exists.

On a GPU and inside simdist (which provides simulated CUDA devices) every name here is ``torch.cuda``'s. On a
CPU-only torch, streams and events order nothing (one CPU executes every op in program order, so they have
nothing to order) and the device is the CPU: the same fakes then run eagerly, e.g. one process per rank over
gloo, which is how the benchmarks time the refit without simulation.
"""
from __future__ import annotations

import contextlib

import torch

__all__ = ["available", "device", "Stream", "Event", "stream", "current_stream", "synchronize", "empty_cache",
           "set_device", "record_stream"]


def available() -> bool:
    return torch.cuda.is_available()


class _CpuEvent:
    def record(self, stream=None):
        return None

    def wait(self, stream=None):
        return None

    def synchronize(self):
        return None

    def query(self):
        return True


class _CpuStream:
    def wait_stream(self, stream):
        return None

    def wait_event(self, event):
        return None

    def record_event(self, event=None):
        return event or _CpuEvent()

    def synchronize(self):
        return None


_CPU_STREAM = _CpuStream()


def device() -> torch.device:
    return torch.device("cuda", torch.cuda.current_device()) if available() else torch.device("cpu")


def Stream():  # noqa: N802 - torch.cuda's name
    return torch.cuda.Stream() if available() else _CpuStream()


def Event():  # noqa: N802 - torch.cuda's name
    return torch.cuda.Event() if available() else _CpuEvent()


def stream(s):
    return torch.cuda.stream(s) if available() else contextlib.nullcontext()


def current_stream():
    return torch.cuda.current_stream() if available() else _CPU_STREAM


def synchronize() -> None:
    if available():
        torch.cuda.synchronize()


def empty_cache() -> None:
    if available():
        torch.cuda.empty_cache()


def set_device(index: int) -> None:
    if available():
        torch.cuda.set_device(index)


def record_stream(t: torch.Tensor, s) -> None:
    if available():
        t.record_stream(s)
