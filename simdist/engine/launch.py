"""Launching device work: the primitive every op, copy and collective goes through.

`launch` queues an op on a stream in virtual time (simdist/engine/scheduler.py), asks the policy for its
duration, and records its memory accesses with the happens-before detector (simdist/engine/detector.py).

Reads and writes are *regions*: objects with `_alloc` (the engine Allocation holding the bytes), `_span`
((lo, hi, dense) byte offsets in the segment, or None to derive it from the view) and `_inner` (a strided view
of the elements: shape, stride(), storage_offset(), element_size(), numel(), is_contiguous(), dtype). The torch
face passes its tensors (simdist/faces/tensor.py SimTensor); engine tests pass simdist/engine/regions.py ByteRange.
"""
from __future__ import annotations

import sys
from heapq import heappush

from .cost import FLOPS_PER_NS, HBM_BYTES_PER_NS, KERNEL_FIXED_NS
from .detector import AccessRecord
from .errors import UnsupportedOperation
from .frames import capture_frames
from .ops import LAUNCH_NS, Op
from .prior import drop_if_owner_covers

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
        if rank.launch_blocking:
            raise UnsupportedOperation(f"{name} under CUDA_LAUNCH_BLOCKING=1 (an NCCL kernel launch that blocks the "
                                       "host until its peers have joined) is not modelled by simdist")
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
        if span is not None and not alloc.records and _fresh(alloc, stream, span):
            # Detector.access on untouched bytes (a fresh output)
            alloc.records = [AccessRecord(op, span[0], span[1], True, alloc.id, span[2], t._inner, rmw)]
        else:
            detector.access(op, t._inner, alloc, True, span, rmw)
    for t in reads:
        if not _among(t, writes):
            detector.access(op, t._inner, t._alloc, False, t._span)
    launches = rank.launches = rank.launches + 1
    if launches % DRAIN_EVERY == 0:
        rank.drain_safe()
    if rank.launch_blocking and kind in ("kernel", "sleep"):
        # CUDA_LAUNCH_BLOCKING=1: a kernel launch returns when the kernel has run, a same-device copy too; a
        # host-device cudaMemcpyAsync does not (an H200: a pinned device-to-host copy_(non_blocking=True) left
        # its stream busy, query() False; b.copy_(a), clone, casts did not: ci/gpu_c_facts.py)
        rank.wait_op(op, "CUDA_LAUNCH_BLOCKING=1")
    return op


def _fresh(alloc, stream, span):
    """Whether a write of `span` to an allocation without records needs no check: its block has no prior
    (engine/prior.py), or this is the new owner's covering write on the block's stream, which drops it."""
    block = alloc.block
    return block.prior is None or drop_if_owner_covers(block, alloc, stream, *span)


def _among(t, seq):
    for x in seq:
        if x is t:
            return True
    return False


_new = object.__new__
_getframe = sys._getframe


def launch_kernel(rank, stream, name, fn, reads, out, nbytes, flops=0, skip=2):
    """launch() for its commonest case, fused: one kernel `fn` (no collective, the duration from the cost model
    and the policy) that writes one tensor `out` allocated for it and reads `reads` (`out` not among them: it is
    fresh). Same op, same clocks, same records and in the same order as launch(rank, stream, name, "kernel", fn,
    reads, (out,), nbytes, flops): tests/engine/test_launch_kernel.py holds them side by side.

    skip: as launch's (capture_frames' skip as if launch_kernel called it)."""
    host = rank.host
    if stream.host_ver != host.ver:
        stream.sync_host(host)
    # Op(stream, name, "kernel", host.clock, fn) with what launch sets next, in one go (every slot of Op is set)
    op = _new(Op)
    op.stream = stream
    op.name = name
    op.kind = "kernel"
    op.launch = t_launch = host.clock
    op.fn = fn
    op.seq = stream.seq = seq = stream.seq + 1
    op.vc = stream.vc
    op.deps_left = 0
    op.waiters = None
    op.done = False
    op.watches = None
    op.coll = None
    op.vc_full = None
    # capture_frames(20, skip), inlined (this frame stands where capture_frames' caller stood)
    try:
        f = _getframe(skip - 1)
    except ValueError:
        f = _getframe(0)
    frames = []
    add = frames.append
    depth = 20
    sb = rank.stack_base
    base = sb[0] if sb is not None else None
    while f is not None and depth:
        if f is base:
            # the frame that called the program, and those above it: they stay where they are while the program
            # runs (a frame's caller cannot move while it runs), so their capture is kept while this frame's
            # offset is the same
            lasti = f.f_lasti
            if sb[1] != lasti:
                sb[2] = capture_frames(20, 0, f)
                sb[1] = lasti
            frames += sb[2][:2 * depth]
            break
        add(f.f_code)
        add(f.f_lasti)
        f = f.f_back
        depth -= 1
    op.frames = frames
    key = (rank.rank, stream.name, seq)
    base = KERNEL_FIXED_NS + nbytes // HBM_BYTES_PER_NS
    if flops:
        base += flops // FLOPS_PER_NS
    op.dur = dur = rank.policy.kernel(key, base)
    rank.schedule_log[key] = dur
    tail = stream.tail
    queue = rank.queue
    if tail is None or tail.end is not None:
        start = t_launch if tail is None or tail.end < t_launch else tail.end
        op.start_lb = op.start = start
        op.end = end = start + dur
        queue.tie += 1
        heappush(queue.heap, (end, queue.tie, op))
    else:
        op.start = op.end = None
        op.start_lb = t_launch
        queue.schedule(op, (tail,))
    stream.tail = op
    host.clock += LAUNCH_NS
    detector = rank.detector
    alloc, span = out._alloc, out._span
    if span is not None and not alloc.records and (alloc.block.prior is None or _fresh(alloc, stream, span)):
        # Detector.access on untouched bytes (a fresh output)
        # AccessRecord(op, span[0], span[1], True, alloc.id, span[2], out._inner, False), every slot set
        rec = _new(AccessRecord)
        rec.op = op
        rec.lo, rec.hi, rec.contig = span
        rec.write = True
        rec.gen = alloc.id
        rec.view = out._inner
        rec.iv = None
        rec.rmw = False
        alloc.records = [rec]
    else:
        detector.access(op, out._inner, alloc, True, span, False)
    for t in reads:
        alloc = t._alloc
        records = alloc.records
        span = t._span
        if span is not None and len(records) == 1:
            r = records[0]
            if r.write and r.op.stream is stream:
                # Detector.access's loop over one record: a write queued earlier on this stream is ordered before
                # this read and is kept, whatever the bytes; the read is recorded after it
                rec = _new(AccessRecord)  # AccessRecord(op, span[0], span[1], False, alloc.id, span[2], t._inner)
                rec.op = op
                rec.lo, rec.hi, rec.contig = span
                rec.write = False
                rec.gen = alloc.id
                rec.view = t._inner
                rec.iv = None
                rec.rmw = False
                alloc.records = [r, rec]
                continue
        detector.access(op, t._inner, alloc, False, span)
    launches = rank.launches = rank.launches + 1
    if launches % DRAIN_EVERY == 0:
        rank.drain_safe()
    if rank.launch_blocking:
        rank.wait_op(op, "CUDA_LAUNCH_BLOCKING=1")  # a kernel launch returns when the kernel has run
    return op
