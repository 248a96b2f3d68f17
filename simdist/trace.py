"""Perfetto / Chrome trace JSON: a rank is a process, a stream a thread, hazards are flow arrows."""
from __future__ import annotations


class TraceSource:
    """What a trace needs of a finished world: its streams and its executed ops, turned into tuples on first
    use (most runs never draw a trace)."""

    def __init__(self, world):
        self.world_size = world.world_size
        self._streams = list(world.streams)
        self._ops = world.ops_log

    @property
    def streams(self):
        return [(s.dev.rank, s.id, s.name) for s in self._streams]

    @property
    def ops(self):
        return [(o.stream.dev.rank, o.stream.id, o.stream.name, o.name, o.kind, o.seq, o.start, o.end)
                for o in self._ops]


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
