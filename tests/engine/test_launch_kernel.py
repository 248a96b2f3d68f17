"""launch_kernel (simdist/engine/launch.py) is launch() for one kernel writing one fresh output, fused for the
per-op fast path (simdist/faces/dispatch.py _fast_functional). The rule it must keep: the op, its clocks, times,
frames, the schedule and every access record and hazard are what launch(rank, stream, name, "kernel", fn, reads,
(out,), nbytes) gives. Two worlds are driven side by side, one through each, and compared field by field."""
import sys

from conftest import Sim
from simdist.engine.launch import launch, launch_kernel
from simdist.engine.ops import Op
from simdist.engine.policies import Jitter


def _go(which, *args, **kwargs):
    return which(*args, **kwargs)  # one call site for both, so that their frames are alike


def _general(rank, stream, name, fn, reads, out, nbytes):
    return _go(launch, rank, stream, name, "kernel", fn, list(reads), [out], nbytes, skip=2)


def _fused(rank, stream, name, fn, reads, out, nbytes):
    return _go(launch_kernel, rank, stream, name, fn, list(reads), out, nbytes, skip=2)


def _op_fields(op):
    out = {}
    for s in Op.__slots__:
        v = getattr(op, s)  # every slot is set (an unset slot raises here)
        if s == "stream":
            v = v.name
        elif s in ("fn", "waiters"):
            v = v is None
        elif s == "watches" and v is not None:
            v = [(w.lo, w.hi, w.other.name, w.bad_if_other_done, w.other_write, w.hazard.kind) for w in v]
        elif s == "frames":
            v = v[:2] + v[4:6]  # _go's and _scenario's (_general or _fused, and the test's line, differ)
        out[s] = v
    return out


def _records(alloc):
    from simdist.engine.detector import AccessRecord
    for r in alloc.records:
        for s in AccessRecord.__slots__:
            getattr(r, s)  # every slot is set
    return [(r.op.name, r.op.seq, r.lo, r.hi, r.write, r.gen, r.contig, r.rmw, r.iv, r.view.storage_offset(),
             r.view.shape) for r in alloc.records]


def _scenario(launcher, base_frame=None):
    """Fresh outputs, reads of written bytes on the same and on another stream, a reused block with freed records,
    an empty region, a launch behind a wait whose marker has no time yet; returns what can be compared."""
    sim = Sim(policy=Jitter(seed=3))
    rank = sim.rank()
    if base_frame is not None:
        rank.stack_base = [base_frame, -1, None]
    s1, s2 = sim.stream(), sim.stream(new=True)
    seen = []
    regions = {}

    def fresh(name, nbytes, stream):
        a = sim.malloc(nbytes, stream)
        regions[name] = (a, sim.region(a))
        return regions[name][1]

    x = fresh("x", 256, s1)
    seen.append(launcher(rank, s1, "k1", lambda: None, (), x, 256))
    y = fresh("y", 256, s1)
    seen.append(launcher(rank, s1, "k2", lambda: None, (x,), y, 512))  # a read of a write on the same stream
    z = fresh("z", 256, s2)
    seen.append(launcher(rank, s2, "k3", lambda: None, (x, y), z, 768))  # reads of writes on another stream
    w = fresh("w", 64, s2)
    seen.append(launcher(rank, s2, "k4", lambda: None, (x, x), w, 64))  # the same region read twice
    # a block freed after other streams' accesses and allocated again: its new allocation starts with records
    del regions["x"], x
    v = fresh("v", 256, s1)
    seen.append(launcher(rank, s1, "k5", lambda: None, (z,), v, 256))
    e = fresh("e", 0, s1)
    seen.append(launcher(rank, s1, "k6", lambda: None, (e,), y, 0))  # an empty read, an output with records
    # a stream whose tail waits on a marker with no time yet (a collective's)
    pending = Op(s1, "pending", "marker", rank.host.clock)
    s2.wait_marker(rank.host, pending)
    u = fresh("u", 128, s2)
    seen.append(launcher(rank, s2, "k7", lambda: None, (y,), u, 128))
    result = {
        "ops": [_op_fields(o) for o in seen],
        "records": {k: _records(a) for k, (a, _r) in regions.items()},
        "schedule": dict(rank.schedule_log),
        "host": (rank.host.clock, rank.launches),
        "heap": [(t, i, o.name) for t, i, o in sorted(rank.queue.heap, key=lambda e: (e[0], e[1]))],
        "hazards": sorted((h.kind, h.first.op, h.second.op, h.count) for h in sim.hazards()),
    }
    rank.stack_base = None
    return result


def test_launch_kernel_makes_what_launch_makes():
    a, b = [_scenario(launcher) for launcher in (_general, _fused)]
    assert a["hazards"]  # the scenario does race (k3 reads on s2 what s1 wrote)
    for key in a:
        if key == "ops":
            for i, (x, y) in enumerate(zip(a[key], b[key])):
                assert x == y, (i, {k: (x[k], y[k]) for k in x if x[k] != y[k]})
        assert a[key] == b[key], key


def test_launch_kernel_copies_the_frames_above_the_program_once():
    """rank.stack_base (the call that runs the program, simdist/session.py rank_body): the frames from it up are
    captured once and copied, and an op's frames are what a full walk of the stack gives."""
    here = sys._getframe()
    a, b = [_scenario(launcher, base) for launcher, base in ((_general, None), (_fused, here))]
    assert a == b
    assert b["ops"][0]["frames"][0] is _go.__code__
