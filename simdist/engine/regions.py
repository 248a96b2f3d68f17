"""Byte ranges as the engine sees them: the region protocol of simdist/engine/launch.py without torch tensors.

`ByteRange(alloc, lo, hi)` names bytes [lo, hi) of an allocation's block (offsets relative to the block), so
the engine can be driven with plain ids and byte ranges, the way PyTorch's own sanitizer tests drive its
EventHandler (tests/engine/). `_inner` is a uint8 view of the bytes (torch is the engine's byte store).
"""
from __future__ import annotations


class ByteRange:
    __slots__ = ("_alloc", "_span", "_inner", "_dev")

    def __init__(self, alloc, lo=0, hi=None, device=None):
        block = alloc.block
        hi = alloc.nbytes if hi is None else hi
        if not 0 <= lo <= hi <= block.size:
            raise ValueError(f"bytes [{lo}, {hi}) are outside the block of {block.size} bytes")
        self._alloc = alloc
        base = block.offset
        self._span = (base + lo, base + hi, True) if hi > lo else None
        self._inner = block.segment.data[base + lo:base + hi]
        self._dev = device

    def __repr__(self):
        lo, hi = (self._span[0], self._span[1]) if self._span else (0, 0)
        return f"<ByteRange alloc={self._alloc.id} [{lo}, {hi})>"
