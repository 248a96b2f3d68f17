"""What a freed block remembers of its stream's accesses, for its next owner (notes x24).

The caching allocator hands a block freed on stream S to S's next allocation at once: S's later work is ordered
after the old owner's queued use by stream order, and nothing else is
(https://pytorch.org/docs/stable/notes/cuda.html#cuda-memory-management). So another stream's access to the new
tensor must be ordered after S's last accesses to those bytes, or it races them (apex's data_prefetcher with its
`wait_stream` line left out: a side stream's copy into a buffer allocated on the main stream). Other streams'
accesses go to the segment's graveyard (Detector.on_free); S's are kept here, as two records: S's latest access
and its latest write (by stream order an access ordered after those is ordered after every earlier one on S),
taken as covering the whole block. The new owner's first covering write on S drops them (ordered after, and it
overwrites every byte); an access from another stream first turns them into records of the old generation,
which the detector checks as it checks the graveyard's (a reuse-after-free when unordered: Detector.take_prior).
"""
from __future__ import annotations


def prior_of(records, stream, prior):
    """(latest access, latest write or None) on `stream` among `records` and an earlier `prior`, or None."""
    acc, wr = prior if prior is not None else (None, None)
    for r in records:
        op = r.op
        if op.stream is stream:
            if acc is None or op.seq > acc.op.seq:
                acc = r
            if r.write and (wr is None or op.seq > wr.op.seq):
                wr = r
    return None if acc is None else (acc, wr)


def merge_priors(a, b):
    """The prior of two adjacent free blocks merged into one (one stream: seqs compare)."""
    if a is None:
        return b
    if b is None:
        return a
    acc = a[0] if a[0].op.seq >= b[0].op.seq else b[0]
    wa, wb = a[1], b[1]
    wr = wa if wb is None or (wa is not None and wa.op.seq >= wb.op.seq) else wb
    return acc, wr


def drop_if_owner_covers(block, alloc, stream, lo, hi, dense):
    """A write on `stream` of bytes [lo, hi) (dense): if it is the block stream's and covers every byte the
    allocation can use, the prior is dropped (ordered after it, and overwriting it). Returns whether it was."""
    if stream is alloc.stream and dense and lo <= block.offset and block.offset + alloc.nbytes <= hi:
        block.prior = None
        return True
    return False
