"""Perfetto / Chrome trace JSON: a rank is a process, a stream a thread, hazards are flow arrows."""
from __future__ import annotations


def chrome_trace(world, hazards):
    events = []
    tids = {}
    for s in world.streams:
        tids[s.name] = s.id
        events.append({"ph": "M", "name": "thread_name", "pid": s.dev.rank, "tid": s.id, "args": {"name": s.name}})
    for r in range(world.world_size):
        events.append({"ph": "M", "name": "process_name", "pid": r, "tid": 0, "args": {"name": f"rank {r}"}})
    index = {}
    for op in world.ops_log:
        ev = {"ph": "X", "name": op.name, "cat": op.kind, "pid": op.stream.dev.rank, "tid": op.stream.id,
              "ts": op.start / 1000.0, "dur": max(op.end - op.start, 1) / 1000.0,
              "args": {"seq": op.seq, "stream": op.stream.name}}
        events.append(ev)
        index[(op.stream.dev.rank, op.stream.name, op.seq)] = op
    for i, h in enumerate(hazards):
        a, b = index.get(h.first_op_key), index.get(h.second_op_key)
        if a is None or b is None:
            continue
        name = f"{h.kind}{' (observed)' if h.observed else ''}"
        events.append({"ph": "s", "id": i + 1, "name": name, "cat": "hazard", "pid": a.stream.dev.rank,
                       "tid": a.stream.id, "ts": a.start / 1000.0})
        events.append({"ph": "f", "bp": "e", "id": i + 1, "name": name, "cat": "hazard", "pid": b.stream.dev.rank,
                       "tid": b.stream.id, "ts": b.start / 1000.0})
        events.append({"ph": "i", "s": "t", "name": f"hazard: {name}", "pid": b.stream.dev.rank, "tid": b.stream.id,
                       "ts": b.start / 1000.0})
    return {"traceEvents": events, "displayTimeUnit": "ns"}
