"""What a finished run found, gathered from its ranks: hazards merged across ranks, the schedule, the digest's
ingredients. Every rank contributes plain data, so the ranks may have run in other processes."""
from __future__ import annotations

from array import array


class RankOutcome:
    """One rank's share of a run's result."""

    __slots__ = ("rank", "returned", "hazards", "ops", "op_names", "op_kinds", "streams", "schedule", "end_time")

    def __init__(self, rank, returned, hazards, ops, op_names, op_kinds, streams, schedule, end_time):
        self.rank = rank
        self.returned = returned
        self.hazards = hazards  # Hazard objects, with slack_ns set
        self.ops = ops  # array("q"): stream id, seq, start, end of every executed op, in execution order
        self.op_names = op_names  # their names and kinds, for the trace
        self.op_kinds = op_kinds
        self.streams = streams  # [(stream id, name)]
        self.schedule = schedule
        self.end_time = end_time


def rank_outcome(rank, tokens, returned):
    """Decide the rank's deferred accesses with every rank's tokens, and collect what it found."""
    rank.detector.finish(tokens)
    hazards = list(rank.detector.order)
    log = rank.ops_log
    if hazards:
        by_key = {(o.stream.dev.rank, o.stream.name, o.seq): o for o in log}
        for hz in hazards:
            a, b = by_key.get(hz.first_op_key), by_key.get(hz.second_op_key)
            if a is not None and b is not None and a.end is not None and b.end is not None:
                hz.slack_ns = a.end - b.end
    # one list, then the array (a third cheaper than extending the array by one op's row at a time)
    ops = array("q", [v for op in log for v in (op.stream.id, op.seq, op.start, op.end)])
    return RankOutcome(rank.rank, returned, hazards, ops, [op.name for op in log], [op.kind for op in log],
                       [(s.id, s.name) for s in rank.streams], dict(rank.schedule_log), log[-1].end if log else 0)


def merge_hazards(outcomes):
    """One Hazard per (kind, first site, second site) over every rank, in rank order: counts add up, observed on
    any rank is observed."""
    merged = {}
    order = []
    for o in sorted(outcomes, key=lambda o: o.rank):
        for h in o.hazards:
            k = h.key
            m = merged.get(k)
            if m is None:
                merged[k] = h
                order.append(h)
            else:
                m.count += h.count
                m.observed = m.observed or h.observed
    return order
