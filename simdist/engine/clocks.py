"""Vector clocks for happens-before, in the style of torch/cuda/_sanitizer.py.

Every stream has a clock (a dict stream-id -> sequence number) shared
copy-on-write by the ops launched on it: an op is identified by
(stream, seq) and knows every op whose (stream, seq) its clock covers.
Events snapshot a stream's clock; waits join it; host syncs join the
device into the host; collectives join their participants.

A collective's cross-rank join is only known once every rank has joined,
so a stream that launched one carries a *token* (a negative key) that is
expanded into the participants' joined clock lazily, when an ordering
question cannot be answered without it.
"""
from __future__ import annotations


def join(a: dict, b: dict) -> dict:
    """A new clock that knows everything a or b knows."""
    if not b:
        return a
    out = dict(a)
    get = out.get
    for k, v in b.items():
        if v > get(k, 0):
            out[k] = v
    return out


def full_clock(op) -> dict:
    """The clock of everything that happened before `op` completed (itself included)."""
    d = dict(op.vc)
    d[op.stream.id] = op.seq
    return d


class TokenTable:
    """Collective tokens -> the joined clock of their participants, once known."""

    def __init__(self):
        self.resolved = {}  # token id (positive) -> full clock
        self.next_id = 0

    def new_token(self) -> int:
        self.next_id += 1
        return -self.next_id

    def expand(self, vc: dict):
        """Merge resolved tokens into vc in place. Returns True if unresolved tokens remain.

        Mutating in place is sound: every op sharing this dict came after the
        collective, so the knowledge is true for all of them.
        """
        unresolved = False
        while True:
            toks = [k for k in vc if k < 0]
            if not toks:
                return unresolved
            progressed = False
            unresolved = False
            for t in toks:
                full = self.resolved.get(-t)
                if full is None:
                    unresolved = True
                    continue
                del vc[t]
                for k, v in full.items():
                    if v > vc.get(k, 0):
                        vc[k] = v
                progressed = True
            if not progressed:
                return unresolved

    def ordered(self, a, b):
        """Did op `a` happen before op `b`? True, False, or None (unknown yet)."""
        if a.stream is b.stream:
            return a.seq <= b.seq
        sid, seq = a.stream.id, a.seq
        vc = b.vc
        if vc.get(sid, 0) >= seq:
            return True
        if not any(k < 0 for k in vc):
            return False
        unresolved = self.expand(vc)
        if vc.get(sid, 0) >= seq:
            return True
        return None if unresolved else False
