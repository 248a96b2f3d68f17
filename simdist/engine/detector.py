"""The happens-before detector: who accessed which bytes, and which pairs of accesses are unordered.

Records are kept per allocation (a live block) over byte ranges of the
segment, not per data_ptr, so views, slices and reused blocks are all seen
(DESIGN.md 5). A new access conflicts with a record when the byte ranges
overlap (exactly, for strided views), one of them writes, and the record's
op does not happen-before the new op. Detection never depends on timing;
timing only decides whether the damage shows (`observed`), which is checked
by comparing the bytes a racing write changes when it lands.
"""
from __future__ import annotations

import torch

from .errors import SimulationError
from .frames import format_frames
from .hazards import Access, Hazard
from .prior import drop_if_owner_covers

GRAVEYARD_LIMIT = 64
WATCH_LIMIT = 64


class AccessRecord:
    """One op's read or write of bytes [lo, hi) of an allocation (gen: the allocation's id)."""

    __slots__ = ("op", "lo", "hi", "write", "gen", "contig", "view", "iv", "rmw")

    def __init__(self, op, lo, hi, write, gen, contig, view, rmw=False):
        self.op = op
        self.lo = lo
        self.hi = hi
        self.write = write
        self.gen = gen
        self.contig = contig
        self.view = view
        self.iv = None
        self.rmw = rmw  # a write that first reads the same bytes (x.add_(1), an in-place all_reduce)


def _intervals(view):
    """Sorted byte intervals [start, end) covered by a strided view."""
    isz = view.element_size()
    sizes, strides = list(view.shape), list(view.stride())
    dims = sorted((st, sz) for sz, st in zip(sizes, strides) if sz > 1)
    run = 1
    if dims and dims[0][0] == 1:
        run = dims[0][1]
        dims = dims[1:]
    starts = torch.zeros(1, dtype=torch.int64)
    for st, sz in dims:
        starts = (starts.unsqueeze(1) + torch.arange(sz, dtype=torch.int64) * st).reshape(-1)
    starts = (starts + view.storage_offset()) * isz
    starts, _ = torch.sort(starts)
    return starts, starts + run * isz


def _iv(r):
    if r.iv is None:
        r.iv = _intervals(r.view) if not r.contig else (torch.tensor([r.lo]), torch.tensor([r.hi]))
    return r.iv


def exact_overlap(a, b):
    if a.contig and b.contig:
        return True
    sa, ea = _iv(a)
    sb, eb = _iv(b)
    # for each interval of b, the first interval of a that ends after it starts
    idx = torch.searchsorted(ea, sb, right=True)
    ok = idx < len(sa)
    if not bool(ok.any()):
        return False
    idx = idx[ok]
    return bool((sa[idx] < eb[ok]).any())


def _kind(r, rec, op, reused):
    if reused:
        return "reuse-after-free"
    if op.kind == "d2h" and not rec.write:
        return "host-read"
    if r.write and rec.write:  # a read-modify-write reads the racing write's bytes first
        return "read-after-write" if rec.rmw else "write-after-write"
    return "read-after-write" if r.write else "write-after-read"


class Watch:
    __slots__ = ("hazard", "other", "bad_if_other_done", "lo", "hi", "data", "other_write")

    def __init__(self, hazard, other, bad_if_other_done, lo, hi, data, other_write):
        self.hazard = hazard
        self.other = other
        self.bad_if_other_done = bad_if_other_done
        self.lo = lo
        self.hi = hi
        self.data = data
        self.other_write = other_write


def take_prior(op, alloc, block, write, lo, hi, dense):
    """An access by `op` to an allocation whose block has a prior (engine/prior.py): the block stream's own
    covering write drops it; another stream's access turns it into records of the old owner (the whole block)
    before it is checked."""
    if op.stream is alloc.stream:
        if write:
            drop_if_owner_covers(block, alloc, op.stream, lo, hi, dense)
        return
    acc, wr = block.prior
    block.prior = None
    lo_b, hi_b = block.offset, block.offset + block.size
    hull = [AccessRecord(acc.op, lo_b, hi_b, acc.write, acc.gen, True, acc.view)]
    if wr is not None and wr is not acc:
        hull.append(AccessRecord(wr.op, lo_b, hi_b, True, wr.gen, True, wr.view))
    alloc.records = hull + alloc.records


class Detector:
    """One rank's detector: its devices' access records, and the hazards found among them."""

    def __init__(self, rank):
        self.owner = rank
        self.hazards = {}  # key -> Hazard
        self.order = []
        self.deferred = []

    # --- allocation lifecycle ------------------------------------------
    def on_malloc(self, alloc):
        seg = alloc.block.segment
        if not seg.graveyard:
            return
        lo = alloc.block.offset
        hi = lo + alloc.block.size
        keep = []
        pulled = {}
        for glo, ghi, recs in seg.graveyard:
            if ghi <= lo or hi <= glo:
                keep.append((glo, ghi, recs))
                continue
            for r in recs:
                if r.lo < hi and lo < r.hi:
                    pulled[id(r)] = r  # an entry only partly covered stays, so records can come back: dedupe
            if glo < lo or ghi > hi:
                keep.append((glo, ghi, recs))
        seg.graveyard = keep
        alloc.records = list(pulled.values())

    def on_free(self, alloc, block):
        # Accesses on the block's own stream are ordered before anything the next owner does on that stream,
        # and a next owner's access from another stream races that owner's first write instead (see
        # _shadowed): only other streams' accesses can make a reuse race. Keep those, one hull per op.
        own = alloc.stream
        recs = [r for r in alloc.records if r.op.stream is not own]
        alloc.records = []
        if not recs:
            return
        if len(recs) > 1:  # a record listed twice is kept once, where it came first
            unique = {}
            for r in recs:
                unique.setdefault(id(r), r)
            recs = list(unique.values())
        if len(recs) > 16:
            recs = _hull_per_op(recs)
        g = block.segment.graveyard
        g.append((block.offset, block.offset + block.size, recs))
        if len(g) > GRAVEYARD_LIMIT:
            del g[0]

    # --- access checking -------------------------------------------------
    def access(self, op, view, alloc, write, span=None, rmw=False):
        """Record that `op` reads or writes `view` (a CPU view of a segment); span: its (lo, hi, dense)."""
        if span is None:
            n = view.numel()
            if n == 0:
                return
            isz = view.element_size()
            lo = view.storage_offset() * isz
            contig = view.is_contiguous()
            if contig:
                hi = lo + n * isz
            else:
                ext = 1
                for s, st in zip(view.shape, view.stride()):
                    if s > 1:
                        ext += (s - 1) * st
                hi = lo + ext * isz
        else:
            lo, hi, contig = span
        block = alloc.block
        if block is not None and block.prior is not None:  # an earlier owner's accesses on the block's stream
            take_prior(op, alloc, block, write, lo, hi, contig)
        rec = AccessRecord(op, lo, hi, write, alloc.id, contig, view, rmw)
        records = alloc.records
        if records:
            ordered = self.owner.tokens.ordered
            keep = []
            for r in records:
                if r.hi <= lo or hi <= r.lo:
                    keep.append(r)
                    continue
                rop = r.op
                if rop is op:
                    keep.append(r)
                    continue
                if not (write or r.write):
                    # two reads never conflict; drop an older read on the same stream we cover
                    if not (rop.stream is op.stream and contig and lo <= r.lo and r.hi <= hi):
                        keep.append(r)
                    continue
                o = rop.seq <= op.seq if rop.stream is op.stream else ordered(rop, op)  # (ordered's first case inline)
                if o:
                    # ordered before a covering write: nothing later can race it without racing us
                    if not (write and contig and lo <= r.lo and r.hi <= hi):
                        keep.append(r)
                    continue
                keep.append(r)
                if not (contig and r.contig) and not exact_overlap(r, rec):
                    continue  # strided views that interleave without sharing a byte
                if r.gen != rec.gen and _shadowed(r, rec, records, ordered):
                    continue  # a newer owner's write, after r, covers the overlap: that write is the race
                if o is None:
                    # the order hangs on a collective not joined yet: decide at the end, but watch the
                    # bytes now so that damage done meanwhile is still seen
                    prov = _Provisional()
                    self._watch(prov, r, rec, alloc.block)
                    self.deferred.append((r, rec, op, alloc.block, prov))
                else:
                    self.report(r, rec, op, alloc.block)
            keep.append(rec)
            alloc.records = keep
        else:
            alloc.records = [rec]

    def report(self, r, rec, op, block, watch=True):
        kind = _kind(r, rec, op, r.gen != rec.gen)
        first = self._access(r)
        second = self._access(rec)
        key = (kind, first.site, second.site)
        h = self.hazards.get(key)
        if h is None:
            dev = op.stream.dev
            h = Hazard(kind, first, second, f"rank {dev.rank} cuda:{dev.index}",
                       first_op_key=op_key(r.op), second_op_key=op_key(op))
            self.hazards[key] = h
            self.order.append(h)
        else:
            h.count += 1
        if watch and not h.observed and h.count <= WATCH_LIMIT and block is not None:
            self._watch(h, r, rec, block)
        return h

    def _access(self, r):
        op = r.op
        dev = op.stream.dev
        v = r.view
        return Access(rank=dev.rank, stream=op.stream.name, op=op.name, is_write=r.write, shape=tuple(v.shape),
                      dtype=str(v.dtype).replace("torch.", ""), frames=op.frames, seq=op.seq)

    def _watch(self, h, r, rec, block):
        lo, hi = max(r.lo, rec.lo), min(r.hi, rec.hi)
        data = block.segment.data
        first, second = r.op, rec.op
        if r.write and (not rec.write or rec.rmw):  # RAW: bad if the reader reads before the write lands
            writer, other, bad_if_done, ow = first, second, True, False
        elif r.write:  # WAW: bad if the second write lands before the first
            writer, other, bad_if_done, ow = first, second, True, True
        else:  # WAR: bad if the write lands before the earlier read
            writer, other, bad_if_done, ow = second, first, False, False
        if writer.done:
            return  # the write already landed, in launch order: the good order
        if ow and other.coll is not None and _coll_reads(other, data, lo, hi):
            ow = False  # an in-place collective reads its buffer at the rendezvous: damage if that comes first
        w = Watch(h, other, bad_if_done, lo, hi, data, ow)
        if writer.watches is None:
            writer.watches = [w]
        else:
            writer.watches.append(w)

    def finish(self, tokens=None):
        """Re-check accesses whose order hung on collectives that are now resolved (`tokens`: every rank's
        resolved tokens, for those this rank learned of only through others' clocks)."""
        if not self.deferred:
            return  # (every rank's tokens matter only to deferred accesses: merging them all into each of N ranks'
            # tables was quadratic in the world size, a third of a 64-rank refit's time)
        if tokens:
            for k, v in tokens.items():
                self.owner.tokens.resolved.setdefault(k, v)
        ordered = self.owner.tokens.ordered
        for r, rec, op, block, prov in self.deferred:
            if ordered(r.op, op) is False:
                h = self.report(r, rec, op, block, watch=False)
                h.observed = h.observed or prov.observed
        self.deferred = []

    # --- execution --------------------------------------------------------
    def execute(self, op):
        try:
            self._execute(op)
        except Exception as e:
            err = op_error(op, e)
            if err is e:
                raise
            raise err from e

    def _execute(self, op):
        watches = op.watches
        if watches is None:
            op.fn()
            op.done = True
            return
        pre = []
        for w in watches:
            if w.hazard.observed:
                continue
            od = w.other.done if w.other_write else _read_done(w.other)
            if od == w.bad_if_other_done:
                pre.append((w, w.data[w.lo:w.hi].clone()))
        if op.fn is not None:
            op.fn()
        op.done = True
        for w, before in pre:
            if not torch.equal(before, w.data[w.lo:w.hi]):
                w.hazard.observed = True


def op_error(op, e):
    """The exception a failing kernel raises, naming where it was launched (kernels run after their launch)."""
    if isinstance(e, SimulationError):
        return e
    if isinstance(e, IndexError) or (type(e) is RuntimeError and "out of bounds" in str(e)):
        # a data-dependent index check inside a CUDA kernel is a device-side assert (CUDA_KERNEL_ASSERT in the
        # index, gather/scatter, embedding and nll_loss kernels), surfacing at a later CUDA call as
        # torch.AcceleratorError "CUDA error: device-side assert triggered" (c10/cuda/CUDAException.h
        # C10_CUDA_CHECK), not the IndexError of the CPU kernel simdist runs
        err = getattr(torch, "AcceleratorError", RuntimeError)
        new = err(f"CUDA error: device-side assert triggered\n(simdist: the CPU kernel of op {op.name} on "
                  f"{op.stream.name} raised {type(e).__name__}: {e}; launched at:\n{format_frames(op.frames)})")
        new.__cause__ = e
        return new
    try:
        return type(e)(f"{e}\n(simdist: raised when op {op.name} on {op.stream.name} ran; launched at:\n"
                       f"{format_frames(op.frames)})")
    except Exception:  # an exception type whose constructor takes other arguments
        return e


def _hull_per_op(recs):
    """Merge each op's records into one contiguous hull (conservative: may overlap more bytes)."""
    by_op = {}
    for r in recs:
        h = by_op.get(id(r.op))
        if h is None:
            by_op[id(r.op)] = AccessRecord(r.op, r.lo, r.hi, r.write, r.gen, True, r.view)
        else:
            h.lo, h.hi, h.write = min(h.lo, r.lo), max(h.hi, r.hi), h.write or r.write
    return list(by_op.values())


def _shadowed(r, rec, records, ordered):
    lo, hi = max(r.lo, rec.lo), min(r.hi, rec.hi)
    for w in records:
        if (w.write and w.gen == rec.gen and w.contig and w.lo <= lo and hi <= w.hi and w.op is not rec.op
                and ordered(r.op, w.op)):
            return True
    return False


class _Provisional:
    """Stands in for a Hazard whose existence is decided at the end of the run."""

    __slots__ = ("observed",)

    def __init__(self):
        self.observed = False


def _read_done(op):
    if op.coll is not None:
        return op.coll.snapped
    return op.done


def _coll_reads(op, data, lo, hi):
    """Whether collective op reads bytes [lo, hi) of segment `data` (its input views, as registered)."""
    base = data.untyped_storage().data_ptr()
    for v in op.coll.reads:
        if v.untyped_storage().data_ptr() != base or not v.numel():
            continue
        vlo = v.storage_offset() * v.element_size()
        vhi = vlo + v.numel() * v.element_size()
        if vlo < hi and lo < vhi:
            return True
    return False


def op_key(op):
    return (op.stream.dev.rank, op.stream.name, op.seq)
