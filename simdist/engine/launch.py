"""Launching device work: the primitive every op, copy and collective goes through.

`launch` queues an op on a stream in virtual time (simdist/engine/scheduler.py), asks the policy for its
duration, and records its memory accesses with the happens-before detector (simdist/engine/detector.py).

Reads and writes are *regions*: objects with `_alloc` (the engine Allocation holding the bytes), `_span`
((lo, hi, dense) byte offsets in the segment, or None to derive it from the view) and `_inner` (a strided view
of the elements: shape, stride(), storage_offset(), element_size(), numel(), is_contiguous(), dtype). The torch
face passes its tensors (simdist/faces/tensor.py SimTensor); engine tests pass simdist/engine/regions.py ByteRange.
"""
from __future__ import annotations

from heapq import heappush

from .cost import FLOPS_PER_NS, HBM_BYTES_PER_NS, KERNEL_FIXED_NS
from .detector import AccessRecord
from .frames import capture_frames
from .ops import LAUNCH_NS, Op

DRAIN_EVERY = 512  # launches between two applications of everything no future launch can precede


def launch(rank, stream, name, kind, fn, reads, writes, nbytes, flops=0, dur=None, coll=None, skip=2):
    """Queue device work `fn` on `stream` and check its accesses; returns the Op.

    skip: frames between launch's caller and the program (capture_frames); the per-op paths pass their own.
    """
    host = rank.host
    if stream.host_ver != host.ver:
        stream.sync_host(host)
    op = Op(stream, name, kind, host.clock, fn)
    op.seq = stream.seq = seq = stream.seq + 1
    op.vc = stream.vc
    op.frames = capture_frames(20, skip)  # deep enough to reach the program through a library and nn.Module
    if coll is not None:
        op.coll = coll
        coll.arrive(rank, op)
        dur = 0
    else:
        key = (rank.rank, stream.name, seq)
        if dur is None:
            base = KERNEL_FIXED_NS + nbytes // HBM_BYTES_PER_NS
            if flops:
                base += flops // FLOPS_PER_NS
            dur = rank.policy.kernel(key, base)
        rank.schedule_log[key] = dur
    op.dur = dur
    tail = stream.tail
    queue = rank.queue
    if tail is None or tail.end is not None:
        # fast path of EventQueue.schedule: the predecessor already has a time
        start = op.launch if tail is None or tail.end < op.launch else tail.end
        op.start_lb = start
        if coll is None:  # EventQueue.start_all for one kernel nobody waits on yet
            op.start = start
            op.end = end = start + dur
            if fn is not None:
                queue.tie += 1
                heappush(queue.heap, (end, queue.tie, op))
            else:
                op.done = True
        else:
            queue.start_all([op])
    else:
        queue.schedule(op, (tail,))
    stream.tail = op
    host.clock += LAUNCH_NS
    detector = rank.detector
    for t in writes:
        alloc, span = t._alloc, t._span
        rmw = _among(t, reads)  # read-modify-write: an in-place op or in-place collective
        if span is not None and not alloc.records:  # Detector.access on untouched bytes (a fresh output)
            alloc.records = [AccessRecord(op, span[0], span[1], True, alloc.id, span[2], t._inner, rmw)]
        else:
            detector.access(op, t._inner, alloc, True, span, rmw)
    for t in reads:
        if not _among(t, writes):
            detector.access(op, t._inner, t._alloc, False, t._span)
    launches = rank.launches = rank.launches + 1
    if launches % DRAIN_EVERY == 0:
        rank.drain_safe()
    return op


def _among(t, seq):
    for x in seq:
        if x is t:
            return True
    return False
