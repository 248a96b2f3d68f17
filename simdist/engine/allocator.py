"""Backing memory and a caching allocator with PyTorch's rules. The bytes live in CPU uint8 tensors (torch is
used here as a byte store only).

Rules mirrored from c10/cuda/CUDACachingAllocator.cpp:
- sizes round up to 512 bytes; requests <= 1 MiB come from the small pool
  (2 MiB segments), larger ones from the large pool (20 MiB segments below
  10 MiB, else rounded up to 2 MiB);
- blocks belong to the stream they were allocated on; a freed block is
  reusable at once by later allocations on that stream (stream order makes it
  safe there) and by no other stream;
- best fit by (size, address); a block is split when the remainder is at least
  512 bytes (small pool) or more than 1 MiB (large pool); free neighbours merge;
- `record_stream(s)` defers the free until the work queued on `s` so far has
  completed (the allocator records an event and polls it at later mallocs);
- `empty_cache()` releases whole free segments; fresh memory holds poison;
- a segment that does not fit the device (or the limit set_per_process_memory_fraction set) makes the
  allocator wait for pending record_stream events, release every whole free segment and try once more
  (num_alloc_retries); if it still does not fit, torch.OutOfMemoryError (num_ooms).
"""
from __future__ import annotations

import mmap
import os
from bisect import bisect_left as _bisect_left, insort as _insort

import torch

from .allocator_stats import FOLD_AT, STAT_FAMILIES, STAT_POOLS, AllocatorStats  # noqa: F401 (re-exported)
from .errors import UnsupportedOperation
from .prior import merge_priors, prior_of

MIN_BLOCK = 512
SMALL_SIZE = 1 << 20
SMALL_BUFFER = 2 << 20
LARGE_BUFFER = 20 << 20
MIN_LARGE_ALLOC = 10 << 20
ROUND_LARGE = 2 << 20

POISON_BYTES = {"nan": 0xFF, "zero": 0x00}

DEVICE_MEMORY = 141 * (1 << 30)  # a simulated H200's total memory (cudaMemGetInfo's total)


def round_size(n: int) -> int:
    return MIN_BLOCK if n < MIN_BLOCK else (n + MIN_BLOCK - 1) // MIN_BLOCK * MIN_BLOCK


def segment_size(n: int) -> int:
    if n <= SMALL_SIZE:
        return SMALL_BUFFER
    if n < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return (n + ROUND_LARGE - 1) // ROUND_LARGE * ROUND_LARGE


# Backing buffers are recycled across runs: refilling mapped memory with poison is ~10x cheaper than
# faulting in fresh pages, which dominated short runs (many schedules per second).
_BUFFERS: dict = {}
_BUFFER_LIMIT = 1 << 30
_buffered = [0]


def _take_buffer(size):
    lst = _BUFFERS.get(size)
    if lst:
        _buffered[0] -= size
        return lst.pop()
    try:
        phys = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        phys = None
    if phys is not None and size > phys // 2:
        raise UnsupportedOperation(f"a device segment of {format_size(size)} fits the simulated GPU but not this "
                                   f"host's memory ({format_size(phys)}), which holds the simulated device's bytes")
    try:
        return torch.empty((size,), dtype=torch.uint8)
    except RuntimeError as e:
        raise UnsupportedOperation(f"a device segment of {format_size(size)} fits the simulated GPU but this host "
                                   f"could not allocate it to hold the simulated device's bytes ({e})") from None


# expandable_segments:True (c10/cuda/CUDACachingAllocator.cpp ExpandableSegment): one segment of virtual address
# space per stream and pool, mapped in pages of kSmallBuffer / kLargeBuffer, sized for 1 1/8 of the device's memory
EXPANDABLE_ADDRESS_SPACE = DEVICE_MEMORY + DEVICE_MEMORY // 8
_MAP_NORESERVE = getattr(mmap, "MAP_NORESERVE", 0x4000)  # Linux: address space only, pages committed when touched


def _virtual_buffer(size):
    """A CPU byte buffer of `size` whose pages the host commits only when they are touched (an expandable segment's
    address space: the pages a program maps are the only ones written)."""
    try:
        m = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _MAP_NORESERVE)
    except (OSError, ValueError) as e:
        raise UnsupportedOperation(f"an expandable segment's {format_size(size)} of address space could not be "
                                   f"reserved on this host to hold the simulated device's bytes ({e})") from None
    return torch.frombuffer(m, dtype=torch.uint8)


def format_size(n):
    """c10/cuda/CUDACachingAllocator.cpp format_size: bytes, KiB, MiB or GiB with two decimals."""
    if n <= 1024:
        return f"{n} bytes"
    if n <= 1048576:
        return f"{n / 1024.0:.2f} KiB"
    if n <= 1073741824:
        return f"{n / 1048576.0:.2f} MiB"
    return f"{n / 1073741824.0:.2f} GiB"


def recycle(memory):
    """Return the segments of a finished run whose blocks are all free (nothing can still view them)."""
    for seg in memory.segments:
        if seg.data is not None and seg.live == 0 and _buffered[0] + seg.size <= _BUFFER_LIMIT:
            _BUFFERS.setdefault(seg.size, []).append(seg.data)
            _buffered[0] += seg.size
            seg.data = None
            seg.typed = {}
        seg.graveyard = []  # its records view the bytes; a finished run's result must not keep them alive


class Segment:
    """One cudaMalloc: a CPU byte buffer that tensors view."""

    __slots__ = ("id", "data", "size", "stream", "small", "graveyard", "live", "hwm", "poison", "typed", "pool_key",
                 "expandable", "page", "unmapped", "base")

    def __init__(self, sid, size, stream, small, poison_byte, expandable=False):
        self.id = sid
        self.size = size
        self.stream = stream
        self.small = small
        self.pool_key = (stream.id, small)  # the pool its free blocks go to (DeviceMemory.pools)
        self.live = 0
        # poison is written lazily, up to the highest byte any block has reached (blocks are carved from
        # the start), so a segment costs only what its tensors use
        self.hwm = 0
        self.poison = poison_byte
        # an expandable segment (DeviceMemory._expandable_block): its pages, its unmapped blocks by offset, and
        # its own range of addresses (data_ptr), apart from cudaMalloc'd segments' (faces: SimTensor.data_ptr)
        self.expandable = expandable
        self.page = (SMALL_BUFFER if small else LARGE_BUFFER) if expandable else None
        self.unmapped = [] if expandable else None
        self.base = None
        self.data = _virtual_buffer(size) if expandable else _take_buffer(size)
        self.typed = {}  # dtype -> the whole segment viewed as that dtype (one as_strided per tensor then)
        # shadow records of freed blocks, kept so that a reuse of the bytes can
        # be checked against accesses still in flight (reuse-after-free)
        self.graveyard = []


class Block:
    """A span of a segment. Its segment and offset never change (a split makes a new block for the rest, a merge
    grows the block in front), so a view of its bytes stays valid for as long as the block lives."""

    __slots__ = ("segment", "offset", "size", "allocated", "prev", "next", "pool_key", "view_key", "view", "prior",
                 "mapped")

    def __init__(self, segment, offset, size):
        self.segment = segment
        self.offset = offset
        self.size = size
        self.allocated = False
        self.prev = None
        self.next = None
        self.pool_key = None
        # the last accesses to these bytes on the segment's stream by earlier owners (engine/prior.py
        # prior_of): None, or (the latest access record, the latest write record or None)
        self.prior = None
        # the face's last view of these bytes and the layout object it was made for (simdist/faces/dispatch.py
        # _allocate_layout): a block reused for the same layout gets the same view object back
        self.view_key = None
        self.view = None
        self.mapped = True  # False: address space of an expandable segment with no pages mapped


class _Remap(Exception):
    """An expandable segment could not map the pages an allocation needs (alloc_block failed): free the cache and
    try again (CUDACachingAllocator malloc's retry)."""

    def __init__(self, size, nbytes):
        self.size, self.nbytes = size, nbytes


class Allocation:
    """Owner of a live block; every SimTensor viewing it holds a reference.

    When the last tensor dies the block returns to the allocator at the host
    time of the rank that dropped it, as the caching allocator does.
    """

    __slots__ = ("allocator", "block", "nbytes", "stream", "uses", "records", "id", "views", "__weakref__")

    def __init__(self, allocator, block, nbytes, stream, aid):
        self.allocator = allocator
        self.block = block
        self.nbytes = nbytes
        self.stream = stream
        self.uses = None  # streams from record_stream
        self.records = []  # the detector's access records of these bytes (simdist/engine/detector.py)
        self.id = aid
        self.views = []  # weak references to the tensors viewing these bytes (the face's; storage resize)

    def __del__(self):
        try:
            self.allocator.free(self)
        except Exception:  # interpreter shutdown or run already torn down
            pass

    def record_stream(self, stream):
        """Tensor.record_stream: the block's reuse waits for the work queued on `stream` when it is freed."""
        if stream is self.stream:
            return
        if self.uses is None:
            self.uses = [stream]
        elif stream not in self.uses:
            self.uses.append(stream)


class DeviceMemory:
    """Per-device caching allocator over poison-filled segments."""

    def __init__(self, rank, device_index, poison):
        self.owner = rank  # the owning Rank (simdist/engine/rank.py)
        self.rank = rank.rank
        self.device_index = device_index
        if isinstance(poison, int):
            self.poison_byte = poison & 0xFF
        else:
            try:
                self.poison_byte = POISON_BYTES[poison]
            except KeyError:
                raise ValueError(f"poison must be 'nan', 'zero' or a byte value, got {poison!r}") from None
        self.segments = []
        self.pools = {}  # (stream_id, small) -> sorted list of (size, seg_id, offset, block)
        self.pending_frees = []  # (allocation, [marker ops])
        self.allocated_bytes = 0
        self.peak_bytes = 0
        self.reserved_bytes = 0
        self.peak_reserved_bytes = 0  # torch.cuda.max_memory_reserved (reserved_bytes.all.peak)
        self.next_alloc_id = 0
        self.closed = False
        self.limit = None  # set_per_process_memory_fraction: the most bytes the segments may reserve
        self.fraction = None
        self.num_alloc_retries = 0
        self.num_ooms = 0
        self.stats = AllocatorStats()
        self.stat_log = self.stats.log  # (the events malloc / free append: engine/allocator_stats.py)
        self._null = None  # the zero-byte segment that size-0 allocations view (no device memory)
        # expandable_segments:True (set by the torch face from the allocator settings): a large block is split
        # like a small one, when the rest is at least MIN_BLOCK (CUDACachingAllocator.cpp should_split)
        self.expandable = False

    # --- pools -----------------------------------------------------------
    def _insert(self, block):
        seg = block.segment
        block.pool_key = key = seg.pool_key
        pool = self.pools.get(key)
        if pool is None:
            pool = self.pools[key] = []
        _insort(pool, (block.size, seg.id, block.offset, id(block), block))

    def _remove(self, block):
        pool = self.pools[block.pool_key]
        i = _bisect_left(pool, (block.size, block.segment.id, block.offset, id(block)))
        assert pool[i][4] is block
        del pool[i]
        block.pool_key = None

    # --- malloc / free ---------------------------------------------------
    def malloc(self, nbytes, stream):
        if nbytes == 0:
            # CUDACachingAllocator::allocate: `if (size != 0)` malloc: an empty storage takes no block (its data
            # pointer is null), so it moves no figure and no later allocation's choice of block
            if self._null is None:
                self._null = Segment(-1, 0, stream, True, self.poison_byte)
            return Allocation(self, Block(self._null, 0, 0), 0, stream, 0)
        if self.pending_frees:
            self._process_pending_frees()
        size = round_size(nbytes)
        small = size <= SMALL_SIZE
        if self.expandable:
            try:
                block = self._expandable_block(size, small, stream)
            except _Remap as r:
                self._out_of_memory(size, r.nbytes)  # empty_cache (unmapping free pages) or OutOfMemoryError
                try:
                    block = self._expandable_block(size, small, stream)
                except _Remap as r2:
                    self._raise_oom(size, r2.nbytes)
            pool = None
        else:
            pool = self.pools.get((stream.id, small))
            block = None
        if pool:
            i = _bisect_left(pool, (size,))
            while i < len(pool) and pool[i][4].segment.expandable:
                i += 1  # expandable segments turned off: get_free_block takes none of their blocks
            if i < len(pool):
                block = pool.pop(i)[4]  # _remove, at the index just found
                block.pool_key = None
        if block is None:
            seg_bytes = segment_size(size)
            if not self._fits(seg_bytes):
                self._out_of_memory(size, seg_bytes)
            seg = Segment(len(self.segments), seg_bytes, stream, small, self.poison_byte)
            self.segments.append(seg)
            self.reserved_bytes += seg_bytes
            self.peak_reserved_bytes = max(self.peak_reserved_bytes, self.reserved_bytes)
            st = self.stats
            st.up("segment", small, 1)
            st.up("reserved_bytes", small, seg_bytes)
            st.num_device_alloc += 1
            block = Block(seg, 0, seg_bytes)
        st = self.stats
        already_split = block.prev is not None or block.next is not None
        expandable = block.segment.expandable
        remaining = block.size - size
        if remaining >= MIN_BLOCK if (small or self.expandable) else remaining > SMALL_SIZE:
            rest = Block(block.segment, block.offset + size, remaining)
            rest.prior = block.prior
            rest.prev, rest.next = block, block.next
            if block.next is not None:
                block.next.prev = rest
            block.next = rest
            block.size = size
            self._insert(rest)
            if already_split:  # an inactive split block shrinks by size bytes
                split_blocks, split_bytes = 0, -size
            else:  # a new inactive split block: the rest of a block that was whole
                split_blocks, split_bytes = 1, remaining
        elif already_split:  # an inactive split block becomes active whole
            split_blocks, split_bytes = -1, -block.size
        else:
            split_blocks = split_bytes = 0
        if expandable:  # free_block / alloc_found_block: "we simply just exclude expandable segments from inactive_split"
            split_blocks = split_bytes = 0
        # alloc_found_block's figures (engine/allocator_stats.py: allocation, allocated_bytes, active,
        # active_bytes, requested_bytes, inactive_split, inactive_split_bytes)
        log = self.stat_log
        bsize = block.size
        log.extend((not small, bsize, bsize, nbytes, split_blocks, split_bytes))
        if len(log) >= FOLD_AT:
            st.fold()
        block.allocated = True
        seg = block.segment
        seg.live += 1
        end = block.offset + block.size
        if end > seg.hwm:
            seg.data[seg.hwm:end].fill_(seg.poison)
            seg.hwm = end
        allocated = self.allocated_bytes = self.allocated_bytes + block.size
        if allocated > self.peak_bytes:
            self.peak_bytes = allocated
        self.next_alloc_id += 1
        alloc = Allocation(self, block, nbytes, stream, self.next_alloc_id)
        if seg.graveyard:  # (Detector.on_malloc has nothing to do without freed records in the segment)
            self.owner.detector.on_malloc(alloc)
        return alloc

    def _fits(self, seg_bytes):
        """alloc_block: the fraction's limit first, then cudaMalloc, which fails past the device's free memory."""
        total = self.reserved_bytes + seg_bytes
        return total <= DEVICE_MEMORY and (self.limit is None or total <= self.limit)

    def _out_of_memory(self, size, seg_bytes):
        """CUDACachingAllocator malloc after alloc_block failed: release_cached_blocks (synchronize_and_free_events:
        the host waits for every pending record_stream event, then every whole free segment is released) and
        alloc_block once more as a retry (num_alloc_retries += 1); if that fails, num_ooms += 1 and
        OutOfMemoryError (TORCH_CHECK_WITH(OutOfMemoryError, false, "CUDA out of memory. Tried to allocate ...")."""
        host_wait = self.owner.wait_op
        for _alloc, markers in list(self.pending_frees):
            for m in markers:
                host_wait(m, "the caching allocator's retry of a failed allocation (release_cached_blocks)")
        self.empty_cache()
        self.num_alloc_retries += 1
        if self._fits(seg_bytes):
            return
        self._raise_oom(size, seg_bytes)

    def _raise_oom(self, size, seg_bytes):
        self.num_ooms += 1
        free = DEVICE_MEMORY - self.reserved_bytes
        allowed = f"{format_size(self.limit)} allowed; " if self.limit is not None else ""
        raise torch.OutOfMemoryError(
            f"CUDA out of memory. Tried to allocate {format_size(seg_bytes)}. GPU {self.device_index} has a total "
            f"capacity of {format_size(DEVICE_MEMORY)} of which {format_size(free)} is free. {allowed}Of the "
            f"allocated memory {format_size(self.allocated_bytes)} is allocated by PyTorch, and "
            f"{format_size(self.reserved_bytes - self.allocated_bytes)} is reserved by PyTorch but unallocated. "
            "If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
            "to avoid fragmentation.  See documentation for Memory Management  "
            "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")

    # --- expandable segments (c10/cuda/CUDACachingAllocator.cpp, expandable_segments:True) --------------
    def _expandable_block(self, size, small, stream):
        """The free block an allocation of `size` takes, removed from its pool: get_free_block's best fit, where a
        block followed by unmapped address space counts as the size it can grow to (so another block that fits is
        preferred to it); else try_allocate_expandable_block: the lowest unmapped range of the stream's segment
        (with the free block just before it, when there is one) that has room, its pages mapped as needed and
        merged with that free block; a new segment of address space when none has room."""
        pool = self.pools.get((stream.id, small))
        if pool:
            i = _bisect_left(pool, (size,))
            if i < len(pool):
                while (pool[i][4].segment.expandable and i + 1 < len(pool)
                       and _growable(pool[i + 1][4]) < _growable(pool[i][4])):
                    i += 1
                block = pool.pop(i)[4]
                block.pool_key = None
                return block
        c = None
        for seg in self.segments:
            if not (seg.expandable and seg.data is not None and seg.stream is stream and seg.small == small):
                continue
            for u in seg.unmapped:
                c = u.prev if _allocatable(u.prev) else u
                if _room(c, size):
                    break
                c = None
            if c is not None:
                break
        if c is None:
            page = SMALL_BUFFER if small else LARGE_BUFFER
            seg = Segment(len(self.segments), -(-EXPANDABLE_ADDRESS_SPACE // page) * page, stream, small,
                          self.poison_byte, expandable=True)
            k = sum(1 for sg in self.segments if sg.expandable)
            seg.base = 0x1_0000_0000_0000 + (self.device_index << 44) + (k << 38)
            self.segments.append(seg)
            c = Block(seg, 0, seg.size)
            c.mapped = False
            seg.unmapped.append(c)
        if not c.mapped:
            c = self._map(c, min(c.size, size))
        while c.size < size:  # free -> unmapped -> ...: map what is missing, merged into c
            c = self._map(c.next, min(size - c.size, c.next.size))
        self._remove(c)
        return c

    def _map(self, b, size):
        """map_block: whole pages from the start of unmapped block `b` covering `size`; the rest stays unmapped;
        the mapped block merges with free mapped neighbours and joins its pool. Returns the merged block."""
        seg = b.segment
        lo = b.offset
        hi = min(lo + -(-size // seg.page) * seg.page, lo + b.size)
        n = hi - lo
        if not self._fits(n):
            raise _Remap(size, n)
        seg.unmapped.remove(b)
        if n < b.size:
            rest = Block(seg, hi, b.size - n)
            rest.mapped = False
            rest.prev, rest.next = b, b.next
            if b.next is not None:
                b.next.prev = rest
            b.next = rest
            b.size = n
            seg.unmapped.append(rest)
            seg.unmapped.sort(key=lambda x: x.offset)
        b.mapped = True
        if lo < seg.hwm:  # pages mapped again: not the bytes they held (poison, as fresh memory)
            seg.data[lo:min(hi, seg.hwm)].fill_(seg.poison)
        p = b.prev
        if p is not None and _allocatable(p) and p.mapped:
            self._remove(p)
            if b.prior is not None:
                p.prior = merge_priors(p.prior, b.prior)
            p.size += b.size
            p.next = b.next
            if b.next is not None:
                b.next.prev = p
            b = p
        nx = b.next
        if nx is not None and _allocatable(nx) and nx.mapped:
            self._remove(nx)
            b.size += nx.size
            b.next = nx.next
            if nx.next is not None:
                nx.next.prev = b
            if nx.prior is not None:
                b.prior = merge_priors(b.prior, nx.prior)
        self._insert(b)
        self.reserved_bytes += n
        self.peak_reserved_bytes = max(self.peak_reserved_bytes, self.reserved_bytes)
        self.stats.up("reserved_bytes", seg.small, n)
        self.stats.num_device_alloc += 1
        return b

    def _unmap_free_pages(self):
        """release_cached_blocks with expandable segments (release_blocks -> unmap_block): every free block's whole
        pages are unmapped (the partial pages at its ends stay mapped, free), merged with unmapped neighbours; a
        segment left with no page mapped is released (release_expandable_segment)."""
        for key, pool in list(self.pools.items()):
            for entry in list(pool):
                b = entry[4]
                seg = b.segment
                if not seg.expandable or b.pool_key is None:
                    continue
                lo = -(-b.offset // seg.page) * seg.page
                hi = (b.offset + b.size) // seg.page * seg.page
                if hi <= lo:
                    continue
                # ExpandableSegment::unmapHandles: `cudaStreamSynchronize(stream_)` first ("MemUnmap and MemRelease
                # do not appear to synchronize in all cases"): the host waits for the segment's stream
                owner = self.owner
                owner.wait_op(seg.stream.record_marker(owner.host),
                              "torch.cuda.empty_cache() (an expandable segment's pages unmapped)")
                self._remove(b)
                end = b.offset + b.size
                if lo > b.offset:  # the partial page before stays a free block
                    b.size = lo - b.offset
                    self._insert(b)
                    mid = Block(seg, lo, hi - lo)
                    mid.prev, mid.next = b, b.next
                    if b.next is not None:
                        b.next.prev = mid
                    b.next = mid
                else:
                    mid = b
                    mid.size = hi - lo
                mid.mapped = False
                if end > hi:  # and the partial page after
                    after = Block(seg, hi, end - hi)
                    after.prior = mid.prior
                    after.prev, after.next = mid, mid.next
                    if mid.next is not None:
                        mid.next.prev = after
                    mid.next = after
                    self._insert(after)
                self.reserved_bytes -= hi - lo
                self.stats.down("reserved_bytes", seg.small, hi - lo)
                self.stats.num_device_free += 1
                p = mid.prev
                if p is not None and not p.mapped:
                    p.size += mid.size
                    p.next = mid.next
                    if mid.next is not None:
                        mid.next.prev = p
                    mid = p
                else:
                    seg.unmapped.append(mid)
                nx = mid.next
                if nx is not None and not nx.mapped:
                    mid.size += nx.size
                    mid.next = nx.next
                    if nx.next is not None:
                        nx.next.prev = mid
                    seg.unmapped.remove(nx)
                seg.unmapped.sort(key=lambda x: x.offset)
        for seg in self.segments:
            if seg.expandable and seg.data is not None and len(seg.unmapped) == 1 and seg.unmapped[0].size == seg.size:
                seg.data = None  # its whole address space released
                seg.typed = {}
                seg.unmapped = []

    def set_fraction(self, fraction):
        """setMemoryFraction: allowed_memory_maximum = fraction * the device's total memory."""
        self.fraction = fraction
        self.limit = int(fraction * DEVICE_MEMORY)

    def reallocate(self, alloc, nbytes, stream):
        """Storage resize: `alloc` gets a new block of `nbytes` on `stream` (none for 0). Returns an allocation
        carrying the old block (its records and recorded streams): copy from it, then drop it, and the old block
        is freed as any allocation is."""
        old = Allocation(self, alloc.block, alloc.nbytes, alloc.stream, alloc.id)
        old.uses, old.records = alloc.uses, alloc.records
        alloc.uses, alloc.records = None, []
        if nbytes:
            new = self.malloc(nbytes, stream)
            alloc.block, alloc.nbytes, alloc.stream, alloc.id, alloc.records = (new.block, nbytes, stream, new.id,
                                                                                new.records)
            new.block = None  # its block is alloc's now
        else:
            alloc.block, alloc.nbytes = None, 0
        return old

    def free(self, alloc):
        if self.closed or alloc.block is None or alloc.block.segment is self._null:
            return
        # the bytes stop counting as allocated at free, even when reuse waits for recorded streams
        # (CUDACachingAllocator::free updates the stats before insert_events)
        self.allocated_bytes -= alloc.block.size
        if alloc.uses:
            size = alloc.block.size
            self.stat_log.extend((not alloc.block.segment.small, -size, 0, 0, 0, 0))  # free's figures
            # record_stream: the block waits for the work queued so far on each
            # recorded stream (an event per stream, polled at later mallocs)
            host = self.owner.host  # the owning process's host, whichever thread dropped it
            markers = [s.record_marker(host) for s in alloc.uses]
            self.pending_frees.append((alloc, markers))
            return
        self._release(alloc, True)

    def _process_pending_frees(self):
        if not self.pending_frees:
            return
        host = self.owner.host
        keep = []
        for alloc, markers in self.pending_frees:
            if all(m.end is not None and m.end <= host.clock for m in markers):
                # the host observed the events complete: later work is ordered after them
                for m in markers:
                    host.join_op(m)
                self._release(alloc)
            else:
                keep.append((alloc, markers))
        self.pending_frees = keep

    def _release(self, alloc, freed_now=False):
        """free_block; freed_now: free()'s figures change in the same event (no record_stream wait between)."""
        block = alloc.block
        alloc.block = None
        recs = alloc.records
        if recs:
            # the block's own stream's last accesses stay with the block (its next owner's accesses from other
            # streams must be ordered after them: prior_of); other streams' go to the segment's graveyard
            block.prior = prior_of(recs, alloc.stream, block.prior)
            own = alloc.stream
            for r in recs:
                if r.op.stream is not own:
                    self.owner.detector.on_free(alloc, block)
                    break
            else:
                alloc.records = []
        block.allocated = False
        block.segment.live -= 1
        small, size = block.segment.small, block.size
        split_blocks = split_bytes = 0
        for nb in (block.prev, block.next):
            if nb is not None and not nb.allocated and nb.pool_key is not None:
                split_blocks -= 1  # a free neighbour, an inactive split block, is subsumed
                split_bytes -= nb.size
                self._remove(nb)
                if nb.prior is not None:
                    block.prior = merge_priors(block.prior, nb.prior)
                    nb.prior = block.prior
                if nb is block.prev:
                    nb.size += block.size
                    nb.next = block.next
                    if block.next is not None:
                        block.next.prev = nb
                    block = nb
                else:
                    block.size += nb.size
                    block.next = nb.next
                    if nb.next is not None:
                        nb.next.prev = block
        self._insert(block)
        if block.prev is not None or block.next is not None:
            split_blocks += 1
            split_bytes += block.size
        log = self.stat_log
        log.extend((not small, -size if freed_now else 0, -size, -alloc.nbytes, split_blocks, split_bytes))
        if len(log) >= FOLD_AT:
            self.stats.fold()

    def empty_cache(self):
        self._process_pending_frees()
        self.stats.num_sync_all_streams += 1  # release_cached_blocks: synchronize_and_free_events first
        self._unmap_free_pages()
        for key, pool in list(self.pools.items()):
            keep = []
            for entry in pool:
                b = entry[4]
                if (not b.segment.expandable and b.prev is None and b.next is None and b.offset == 0
                        and b.size == b.segment.size):
                    self.reserved_bytes -= b.size
                    self.stats.down("segment", b.segment.small, 1)
                    self.stats.down("reserved_bytes", b.segment.small, b.size)
                    self.stats.num_device_free += 1
                    b.segment.data = None
                    b.segment.typed = {}
                else:
                    keep.append(entry)
            self.pools[key] = keep


def _allocatable(b):
    """find_expandable_block's `allocatable`: a block no one holds and no pending free waits for (a free, mapped
    block in its pool, or unmapped address space)."""
    return b is not None and not b.allocated and (b.pool_key is not None or not b.mapped)


def _room(c, size):
    """has_available_address_space: the free and unmapped blocks from `c` on hold `size` bytes."""
    n = 0
    while n < size and _allocatable(c):
        n += c.size
        c = c.next
    return n >= size


def _growable(b):
    """get_free_block's expandable_size: a block's size and the unmapped space right after it."""
    nx = b.next
    return b.size + (nx.size if nx is not None and not nx.mapped else 0)
