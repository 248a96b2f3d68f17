"""Vector clocks for happens-before, in the style of torch/cuda/_sanitizer.py.

Every stream has a clock (a dict stream-id -> sequence number) shared copy-on-write by the ops launched on it:
an op is identified by (stream, seq) and knows every op whose (stream, seq) its clock covers. Stream ids are
unique across the world (a rank's streams are numbered from rank << STREAM_ID_BITS), so clocks can travel
between ranks. Events snapshot a stream's clock; waits join it; host syncs join the device into the host;
collectives join their participants.

A collective's cross-rank join is only known once every participant has launched its side, so a stream that
launched one carries a *token* (a tuple key naming the collective: (group key, sequence number)), expanded
into the participants' joined clock lazily, when an ordering question cannot be answered without it. A rank
resolves the tokens of its own collectives from its peers' messages; tokens it learned from others (through
their clocks) are resolved at the end of the run from every rank's table.
"""
from __future__ import annotations

STREAM_ID_BITS = 24


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


def merge_into(vc: dict, b: dict) -> None:
    """vc learns everything b knows, in place (a token's entry is always 1: a missing one is added)."""
    get = vc.get
    for k, v in b.items():
        if v > get(k, 0):
            vc[k] = v


def full_clock(op) -> dict:
    """The clock of everything that happened before `op` completed (itself included)."""
    d = dict(op.vc)
    d[op.stream.id] = op.seq
    return d


class TokenTable:
    """Collective tokens -> the joined clock of their participants, once known."""

    def __init__(self):
        self.resolved = {}  # token (group key, seq) -> full clock
        # token -> (its clock's stream entries, its clock's tokens) while that clock names no resolved token.
        # Such a clock does not change (merge() changes a resolved clock only to expand a resolved token it
        # names) until one of its tokens is resolved: resolve() then drops the entry (`watch`: unresolved token
        # -> the tokens whose entry it voids). Tokens added to `resolved` other than by resolve() (the run's end
        # hands every rank's table to every other) turn this cache off: len(resolved) != n_resolved.
        self.clean = {}
        self.watch = {}
        self.n_resolved = 0

    def expand(self, vc: dict, _busy=None):
        """Merge resolved tokens into vc in place. Returns True if unresolved tokens remain."""
        self.merge(vc, _busy)
        return self.has_tokens(vc)

    def merge(self, vc: dict, _busy=None):
        """Merge resolved tokens into vc in place (expand without its answer).

        Mutating in place is sound: every op sharing this dict came after the collective, so the knowledge is
        true for all of them. A resolved clock is expanded itself before it is merged (and keeps that
        expansion), so each token's clock is expanded once, not at every question (a clock names every earlier
        collective of its stream). The resolved tokens a clock names are found by a set intersection: a clock
        also carries every collective it knows of and this rank cannot resolve (other groups'), and scanning
        those at every question was most of the cost of a run with many collectives.

        Most such merges change nothing but a few stream entries (a collective's joined clock echoes what its
        members knew, and the tokens a clock carries are mostly other groups' collectives that every clock of
        this rank carries too): for a resolved clock that names no resolved token (`clean`), when vc already
        has every token it names, only its stream entries are merged. The same entries are set, in the same
        order, as the plain loop would.
        """
        resolved = self.resolved
        hit = vc.keys() & resolved.keys()  # (stream ids are ints, never tokens)
        if not hit:
            return
        toks = [k for k in vc if k in hit] if len(hit) > 1 else hit  # in the clock's order, as it was
        clean = self.clean if len(resolved) == self.n_resolved else None
        for t in toks:
            full = resolved[t]
            c = clean.get(t) if clean is not None else None
            if c is None:
                if full.keys() & resolved.keys():
                    # (collectives that deadlock can name each other: expand each clock once per question)
                    busy = _busy if _busy is not None else set()
                    if id(full) not in busy and id(full) != id(vc):
                        busy.add(id(vc))
                        busy.add(id(full))
                        self.merge(full, busy)
                elif clean is not None:
                    c = self._mark_clean(t, full)
            if vc.pop(t, None) is None:
                continue
            if c is not None and c[1] <= vc.keys():
                get = vc.get
                for k, v in c[0]:
                    if v > get(k, 0):
                        vc[k] = v
            else:
                merge_into(vc, full)  # (a token missing from vc is added: its entry, 1, is above get()'s 0)

    def _mark_clean(self, t, full):
        streams = []
        toks = []
        for k, v in full.items():
            if type(k) is tuple:
                toks.append(k)
            else:
                streams.append((k, v))
        watch = self.watch
        for k in toks:
            w = watch.get(k)
            if w is None:
                watch[k] = [t]
            else:
                w.append(t)
        c = self.clean[t] = (tuple(streams), frozenset(toks))
        return c

    @staticmethod
    def has_tokens(vc: dict) -> bool:
        for k in vc:
            if type(k) is tuple:
                return True
        return False

    def resolve(self, token, full: dict):
        """`token` stands for clock `full` (its participants' joined clocks), expanded now with what is known."""
        self.merge(full)
        self.resolved[token] = full
        self.n_resolved += 1
        void = self.watch.pop(token, None)
        if void is not None:
            clean = self.clean
            for t in void:
                clean.pop(t, None)

    def expanded(self, vc: dict) -> dict:
        """A copy of vc with every token this table knows expanded (to send to another rank)."""
        out = dict(vc)
        self.merge(out)
        return out

    def ordered(self, a, b):
        """Did op `a` happen before op `b`? True, False, or None (unknown yet)."""
        if a.stream is b.stream:
            return a.seq <= b.seq
        sid, seq = a.stream.id, a.seq
        vc = b.vc
        if vc.get(sid, 0) >= seq:
            return True
        if not any(type(k) is tuple for k in vc):
            return False
        unresolved = self.expand(vc)
        if vc.get(sid, 0) >= seq:
            return True
        return None if unresolved else False
