"""Perfetto / Chrome trace JSON: a rank is a process, a stream a thread, hazards are flow arrows."""
from __future__ import annotations


class TraceSource:
    """What a trace needs of a finished run: every rank's streams and executed ops (from its RankOutcome),
    turned into events on first use (most runs never draw a trace)."""

    def __init__(self, outcomes, world_size):
        self.world_size = world_size
        self.outcomes = outcomes

    @property
    def streams(self):
        return [(o.rank, sid, name) for o in self.outcomes for sid, name in o.streams]

    @property
    def ops(self):
        out = []
        for o in self.outcomes:
            names = dict(o.streams)
            ops = o.ops
            for i in range(0, len(ops), 4):
                sid, seq, start, end = ops[i], ops[i + 1], ops[i + 2], ops[i + 3]
                out.append((o.rank, sid, names.get(sid, str(sid)), o.op_names[i // 4] if o.op_names else "op",
                            o.op_kinds[i // 4] if o.op_kinds else "", seq, start, end))
        return out


def chrome_trace(src, hazards):
    events = []
    for rank, sid, name in src.streams:
        events.append({"ph": "M", "name": "thread_name", "pid": rank, "tid": sid, "args": {"name": name}})
    for r in range(src.world_size):
        events.append({"ph": "M", "name": "process_name", "pid": r, "tid": 0, "args": {"name": f"rank {r}"}})
    index = {}
    for rank, sid, sname, name, kind, seq, start, end in src.ops:
        events.append({"ph": "X", "name": name, "cat": kind, "pid": rank, "tid": sid, "ts": start / 1000.0,
                       "dur": max(end - start, 1) / 1000.0, "args": {"seq": seq, "stream": sname}})
        index[(rank, sname, seq)] = (rank, sid, start)
    for i, h in enumerate(hazards):
        a, b = index.get(h.first_op_key), index.get(h.second_op_key)
        if a is None or b is None:
            continue
        name = f"{h.kind}{' (observed)' if h.observed else ''}"
        events.append({"ph": "s", "id": i + 1, "name": name, "cat": "hazard", "pid": a[0], "tid": a[1],
                       "ts": a[2] / 1000.0})
        events.append({"ph": "f", "bp": "e", "id": i + 1, "name": name, "cat": "hazard", "pid": b[0], "tid": b[1],
                       "ts": b[2] / 1000.0})
        events.append({"ph": "i", "s": "t", "name": f"hazard: {name}", "pid": b[0], "tid": b[1],
                       "ts": b[2] / 1000.0})
    return {"traceEvents": events, "displayTimeUnit": "ns"}
