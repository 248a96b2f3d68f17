"""TokenTable.merge's cache of clean resolved clocks (simdist/engine/clocks.py) changes no clock: against the plain
expansion (every resolved token's clock re-checked for resolved tokens and merged entry by entry at every merge),
over random sequences of collectives resolved, clocks joined and tokens expanded, every clock ends with the same
entries in the same order, and `ordered` gives the same answers."""
import random

from simdist.engine import clocks
from simdist.engine.clocks import TokenTable, merge_into


class PlainTable(TokenTable):
    """The expansion without the cache (what merge did before it)."""

    def merge(self, vc, _busy=None):
        resolved = self.resolved
        hit = vc.keys() & resolved.keys()
        if not hit:
            return
        toks = [k for k in vc if k in hit] if len(hit) > 1 else hit
        for t in toks:
            full = resolved[t]
            if full.keys() & resolved.keys():
                busy = _busy if _busy is not None else set()
                if id(full) not in busy and id(full) != id(vc):
                    busy.add(id(vc))
                    busy.add(id(full))
                    self.merge(full, busy)
            if vc.pop(t, None) is None:
                continue
            merge_into(vc, full)

    def resolve(self, token, full):
        self.merge(full)
        self.resolved[token] = full


def _script(seed, steps=400):
    """A random run of one rank's table: (op, args) with clocks named by index."""
    rng = random.Random(seed)
    ops = []
    n_clocks = 6
    pending = []  # tokens launched, not resolved yet
    seq = 0
    for _ in range(steps):
        r = rng.random()
        if r < 0.25:  # a collective launched: its token enters some clocks
            seq += 1
            tok = (f"pg{rng.randint(1, 4)}", seq)
            ops.append(("token", tok, rng.sample(range(n_clocks), rng.randint(1, 3))))
            if rng.random() < 0.6:  # one this rank can resolve (its own group's)
                pending.append(tok)
        elif r < 0.4 and pending:  # one resolved, from some clocks' join
            tok = pending.pop(rng.randrange(len(pending)))
            ops.append(("resolve", tok, rng.sample(range(n_clocks), rng.randint(1, 3))))
        elif r < 0.65:  # a stream advances
            ops.append(("tick", rng.randrange(n_clocks), rng.randint(0, 5)))
        elif r < 0.85:  # one clock learns another's (an event wait, a host sync)
            ops.append(("join", rng.randrange(n_clocks), rng.randrange(n_clocks)))
        else:  # an ordering question expands a clock in place
            ops.append(("merge", rng.randrange(n_clocks)))
    return ops, n_clocks


def _play(table, ops, n_clocks):
    vcs = [{} for _ in range(n_clocks)]
    answers = []
    for op in ops:
        kind = op[0]
        if kind == "token":
            for i in op[2]:
                vcs[i] = dict(vcs[i])
                vcs[i][op[1]] = 1
        elif kind == "resolve":
            full = {}
            for i in op[2]:
                merge_into(full, vcs[i])
            table.resolve(op[1], full)
        elif kind == "tick":
            i, s = op[1], op[2]
            vcs[i] = dict(vcs[i])
            vcs[i][s] = vcs[i].get(s, 0) + 1
        elif kind == "join":
            vcs[op[1]] = clocks.join(vcs[op[1]], vcs[op[2]])
        else:
            table.merge(vcs[op[1]])
            answers.append(table.has_tokens(vcs[op[1]]))
    for vc in vcs:
        answers.append(table.expand(vc))
    return [list(vc.items()) for vc in vcs], [list(v.items()) for v in table.resolved.values()], answers


def test_cached_merge_gives_the_plain_expansion_entry_for_entry():
    for seed in range(60):
        ops, n = _script(seed)
        assert _play(TokenTable(), ops, n) == _play(PlainTable(), ops, n), seed


def test_cache_is_off_once_tokens_arrive_from_other_tables():
    """The run's end hands every rank's resolved clocks to every other table (Detector.finish): tokens added
    other than by resolve() turn the cache off, since another table may expand those clocks in place."""
    t = TokenTable()
    t.resolve(("pg1", 1), {0: 1, ("pg2", 1): 1})
    t.merge({("pg1", 1): 1, 3: 1})
    assert t.clean
    t.resolved.setdefault(("pg2", 1), {5: 2})
    vc = {("pg1", 1): 1}
    t.merge(vc)
    assert vc == {0: 1, 5: 2}  # the plain path: pg1's clock expanded with pg2's first
