"""Collective semantics: groups, rendezvous, matching, timing and reductions (NCCL and gloo).

Rules (FACTS.md "PyTorch semantics"; torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp):
- Ranks meet at a rendezvous keyed by (group, sequence number). A device collective starts on each rank at its
  stream time and ends at the latest start plus its cost; it reads every input when the last rank has started
  (NCCL kernels spin until their peers arrive) and writes the outputs at the end.
- Stream semantics per profile: "2.7" runs every collective on the group's internal NCCL stream, which first
  waits on the caller's current stream; its tensors are record_stream-ed there (or, with
  TORCH_NCCL_AVOID_RECORD_STREAMS=1, stashed until wait()); async_op=False makes the current stream wait on the
  end (the host is not blocked). "2.8": async_op=False runs on the current stream (nothing recorded or stashed);
  async_op=True runs on the internal stream and stashes its tensors.
- Cross-rank checks as TORCH_DISTRIBUTED_DEBUG=DETAIL: op, sizes, dtypes and root must match, else
  CollectiveMismatch naming every rank's call. A collective some rank never joins is a Deadlock.
- A group's NCCL communicator is created at its first collective, blocking the host until every member arrives
  (unless communicators are made eagerly, init_process_group(device_id=...)).
- gloo collectives on CPU tensors and object collectives are host rendezvous: synchronous on the host.
- Gathers and broadcasts are bit-exact; reductions add in rank order.
"""
from __future__ import annotations

import torch

from . import clocks, cost
from .errors import CollectiveMismatch, Deadlock, SimulationError
from .frames import capture_frames, format_frames
from .launch import launch


class Group:
    """A process group as the engine sees it: its member ranks and per-rank call counters.
    (The torch face subclasses it with torch.distributed's ProcessGroup API.)"""

    def __init__(self, gid, ranks, name):
        self.id = gid
        self.ranks = list(ranks)
        self.index = {r: i for i, r in enumerate(self.ranks)}
        self.name = name
        self.seq = {}  # rank -> collectives issued on this group so far
        self.comm_ready = set()  # ranks whose NCCL communicator for this group exists

    def size(self):
        return len(self.ranks)


class CollectiveTable:
    """Every group and collective instance of a world."""

    def __init__(self, world, group_class=Group):
        self.world = world
        self.group_class = group_class
        self.world_group = group_class(0, range(world.world_size), "world")
        self.groups = {(tuple(range(world.world_size)), -1): self.world_group}
        self.group_count = {}  # (rank, ranks) -> groups of these ranks this rank made so far
        self.instances = {}  # (group id, seq) -> rendezvous
        self.p2p_count = {}  # ((group id, src, dst), side) -> P2P ops so far
        self.p2p_pairs = {}  # (group id, src, dst) -> the Group of the pair
        self.splits = {}  # (group id, seq) -> {group rank: (input splits, output splits)} of all_to_all_single
        self.n_groups = 1
        self.eager_init = False  # init_process_group(device_id=...): communicators made at once
        self.comm_arrivals = {}  # group id -> {rank: host time} at its first collective

    # --- groups -----------------------------------------------------------
    def new_group(self, rank, ranks, desc=None):
        """The group of `ranks` made by this rank's n-th new_group call over them (every member calls it)."""
        ranks = sorted(set(ranks)) if ranks is not None else list(range(self.world.world_size))
        for r in ranks:
            if not 0 <= r < self.world.world_size:
                raise ValueError(f"new_group: rank {r} is not in the world of size {self.world.world_size}")
        k = (rank.rank, tuple(ranks))
        n = self.group_count.get(k, 0)
        self.group_count[k] = n + 1
        key = (tuple(ranks), n)
        g = self.groups.get(key)
        if g is None:
            gid = self.n_groups
            self.n_groups += 1
            name = desc or f"pg{gid}"
            g = self.groups[key] = self.group_class(gid, ranks, name)
        return g

    def p2p_pair(self, group, src, dst, rank, is_send):
        """The two-rank group of a (src, dst) P2P channel, with this side's call counter advanced."""
        ck = (group.id, src, dst)
        side = 0 if is_send else 1
        cnt = self.p2p_count.get((ck, side), 0) + 1
        self.p2p_count[(ck, side)] = cnt
        pair = self.p2p_pairs.get(ck)
        if pair is None:
            pair = self.p2p_pairs[ck] = self.group_class(("p2p", group.id, src, dst), sorted((src, dst)),
                                                         f"p2p:{src}->{dst}")
        pair.seq[rank.rank] = cnt - 1
        return pair

    # --- communicators -----------------------------------------------------
    def ensure_communicator(self, rank, g):
        """ProcessGroupNCCL creates a group's communicator at its first collective (ncclCommInitRank, after a
        store exchange), blocking the host until every member has arrived there, unless init_process_group got a
        device_id (then communicators are made eagerly). Ranks that first use two groups in different orders
        therefore hang on real GPUs; here they wait for each other and the run ends in a Deadlock naming it."""
        if self.eager_init or rank.rank in g.comm_ready or isinstance(g.id, tuple):
            return  # (P2P pairs: their set-up inside batched/grouped calls is not modelled)
        arrived = self.comm_arrivals.setdefault(g.id, {})
        arrived[rank.rank] = rank.host.clock
        if len(arrived) < g.size():
            def ready():
                return max(arrived.values()) if len(arrived) == g.size() else None
            rank.block(ready, ready, f"the NCCL communicator set-up of group {g.name} {g.ranks} (its first collective)")
        rank.host.clock = max(rank.host.clock, max(arrived.values()))
        g.comm_ready.add(rank.rank)

    # --- rendezvous -------------------------------------------------------
    def instance(self, rank, g, kind):
        """This rank's next rendezvous on group g ("object", "cpu" or a device collective's kind)."""
        n = g.seq.get(rank.rank, 0) + 1
        g.seq[rank.rank] = n
        key = (g.id, n)
        inst = self.instances.get(key)
        if inst is None:
            inst = self.instances[key] = (HostRendezvous(self, g, n) if kind == "object" else
                                          CpuRendezvous(self, g, n) if kind == "cpu" else Collective(self, g, n, kind))
        return inst

    def pending_summary(self):
        lines = []
        for inst in self.instances.values():
            if not inst.complete:
                joined = sorted(inst.arrived)
                missing = [r for r in inst.group.ranks if r not in inst.arrived]
                first = inst.calls[joined[0]] if joined else None
                where = ""
                if first is not None:
                    uf = format_frames(first[2], "      ")
                    where = f"\n      issued by rank {joined[0]} at:\n{uf}"
                if missing:
                    state = f"joined by ranks {joined}, never by ranks {missing}"
                else:
                    state = ("joined by every rank, but some rank's side is queued on its stream behind work that "
                             "can never start (a cycle of waits between streams or ranks)")
                lines.append(f"  {first[0] if first else inst.kind} #{inst.seq} on group {inst.group.name}: "
                             f"{state}{where}")
        return ("pending collectives:\n" + "\n".join(lines)) if lines else ""

    def check_finished(self):
        s = self.pending_summary()
        if s:
            raise Deadlock("the run ended with collectives some ranks never joined (on GPUs this hangs "
                           "until the NCCL watchdog fires):\n" + s)


class Collective:
    """One device collective instance: every member rank's side of (group, seq)."""

    def __init__(self, table, group, seq, kind):
        self.table = table
        self.group = group
        self.seq = seq
        self.kind = kind
        self.token = table.world.tokens.new_token()
        self.arrived = {}  # rank -> op
        self.calls = {}  # rank -> (description, signature, frames)
        self.specs = {}  # rank -> (input views, output views)
        self.snaps = {}
        self.snapped = set()
        self.started = 0
        self.complete = False
        self.end = None
        self.compute = None
        self.nbytes = 0

    def register(self, rank, desc, sig, frames):
        """This rank's call; a signature that differs from another rank's is a CollectiveMismatch."""
        self.calls[rank.rank] = (desc, sig, frames)
        for r, (d2, s2, f2) in self.calls.items():
            if r != rank.rank and s2 != sig:
                raise CollectiveMismatch(
                    f"ranks issued different collectives as call #{self.seq} on group {self.group.name} "
                    f"{self.group.ranks}:\n  rank {r}: {d2}\n{format_frames(f2, '      ')}\n"
                    f"  rank {rank.rank}: {desc}\n{format_frames(frames, '      ')}")

    def arrive(self, rank, op):
        self.arrived[rank.rank] = op
        if len(self.arrived) == len(self.group.ranks):
            full = {}
            for o in self.arrived.values():
                full = clocks.join(full, clocks.full_clock(o))
            self.table.world.tokens.resolved[-self.token] = full

    def participant_started(self, op):
        self.started += 1
        if (self.started == len(self.group.ranks) and len(self.arrived) == len(self.group.ranks)
                and all(o.start is not None for o in self.arrived.values())):
            self._finish_timing()

    def _finish_timing(self):
        world = self.table.world
        queue = world.queue
        ops = [self.arrived[r] for r in self.group.ranks]
        start = max(o.start for o in ops)
        # NCCL kernels wait for their peers, so the data moves once the last rank has started:
        # every input is read at that moment (and every output written at the end)
        for o in ops:
            queue.push(start, _Snapshot(self, o))
        base = cost.collective_ns(self.kind, self.nbytes, len(ops))
        key = (f"{self.group.name}", self.seq)
        dur = world.policy.collective(key, base)
        world.schedule_log[key] = dur
        self.end = start + max(1, dur)
        for o in ops:
            o.end = self.end
        queue.push(self.end, self)
        for o in ops:
            queue.resolved(o)

    def snapshot_taken(self, op):
        return op.stream.dev.rank in self.snapped

    def take_snapshot(self, op):
        r = op.stream.dev.rank
        self.snapped.add(r)
        ins = self.specs[r][0]
        self.snaps[r] = [t.clone() for t in ins]

    def execute(self):
        world = self.table.world
        self.complete = True
        order = self.group.ranks
        results = self.compute([self.snaps.get(r, []) for r in order])
        for i, r in enumerate(order):
            op = self.arrived[r]
            outs = self.specs[r][1]
            vals = results[i]

            def fn(outs=outs, vals=vals):
                for o, v in zip(outs, vals):
                    if v is not None:
                        o.copy_(v.reshape(o.shape) if v.shape != o.shape else v)
            op.fn = fn
            world.detector.execute(op)
            op.fn = None
            op.watches = None
            world.ops_log.append(op)
        # drop every tensor reference: the instance stays in the table for reports
        self.snaps = {}
        self.specs = {}
        self.compute = None


class _Snapshot:
    """Queue item: a collective side reads its inputs (when the last rank has started)."""

    __slots__ = ("coll", "op")

    def __init__(self, coll, op):
        self.coll = coll
        self.op = op

    def execute(self):
        self.coll.take_snapshot(self.op)


class HostRendezvous:
    """Object collectives: the host pickles, exchanges through the device and syncs."""

    def __init__(self, table, group, seq):
        self.table = table
        self.group = group
        self.seq = seq
        self.kind = "object"
        self.arrived = {}
        self.calls = {}
        self.payloads = {}
        self.complete = False
        self.done_time = None
        self.vc = {}

    register = Collective.register

    def arrive(self, rank, payload):
        self.arrived[rank.rank] = rank.host.clock
        self.payloads[rank.rank] = payload
        self.vc = clocks.join(self.vc, rank.host.vc)
        if len(self.arrived) == len(self.group.ranks):
            nbytes = sum(len(p) for p in self.payloads.values())
            self.done_time = max(self.arrived.values()) + cost.collective_ns("all_gather", nbytes, len(self.arrived))
            self.complete = True


class CpuRendezvous(HostRendezvous):
    """A gloo collective on CPU tensors: synchronous on the host. Every rank's inputs are read when the last
    rank arrives and each rank's outputs are written before its call returns."""

    def __init__(self, table, group, seq):
        super().__init__(table, group, seq)
        self.kind = "cpu"
        self.results = None


def mismatch(inst, g, rank, desc, frames):
    """Raise the CollectiveMismatch of a rank whose call meets another kind of rendezvous."""
    lines = [f"ranks issued different collectives as call #{inst.seq} on group {g.name} {g.ranks}:"]
    for r, (d2, _s, f2) in sorted(inst.calls.items()):
        lines.append(f"  rank {r}: {d2}\n{format_frames(f2, '      ')}")
    lines.append(f"  rank {rank.rank}: {desc}\n{format_frames(frames, '      ')}")
    raise CollectiveMismatch("\n".join(lines))


def launch_collective(rank, g, kind, desc, sig, reads, writes, compute, async_op, nbytes, stream_key=None):
    """One rank's side of a device collective on group g: rendezvous, matching, the stream it runs on per the
    NCCL profile, and its accesses. Returns (op, end marker or None, stashed tensors or None)."""
    world = rank.world
    table = world.collectives
    table.ensure_communicator(rank, g)
    inst = table.instance(rank, g, kind)
    frames = capture_frames()
    if not isinstance(inst, Collective) or inst.kind != kind:
        mismatch(inst, g, rank, desc, frames)
    inst.register(rank, desc, sig, frames)
    inst.compute = compute
    # CPU views only: holding the tensors would keep their blocks alive longer than NCCL does (on 2.8 a
    # synchronous collective neither records nor stashes its tensors, so a freed input can be reused at once)
    inst.specs[rank.rank] = ([t._inner for t in reads], [t._inner for t in writes])
    inst.nbytes = max(inst.nbytes, nbytes)
    devs = {o._dev.index for o in list(reads) + list(writes)}
    dev = rank.device(next(iter(devs))) if devs else rank.device()
    for r, o in inst.arrived.items():
        if o.stream.dev.index == dev.index and world.device_count > 1 and world.world_size > 1 and r != rank.rank:
            raise SimulationError(f"NCCL error: Duplicate GPU detected: rank {rank.rank} and rank {r} both on "
                                  f"CUDA device {dev.index} (call torch.cuda.set_device(local_rank) first)")
    host = rank.host
    cur = rank.current_stream(dev.index)
    on_side = world.nccl_profile == "2.7" or async_op
    if on_side:
        stream = dev.nccl_stream(stream_key or g.name)
        stream.wait_marker(host, cur.record_marker(host))
    else:
        stream = cur
    op = launch(rank, stream, f"nccl:{kind}", "collective", None, reads, writes, 0, coll=inst)
    op.frames = frames
    stream.vc = dict(stream.vc)
    stream.vc[inst.token] = 1
    return op, stream, cur, on_side


def host_collective(rank, g, kind, desc, sig, reads, outputs, compute, nbytes):
    """A gloo collective on CPU tensors: the host blocks until every member has arrived, then writes its
    outputs."""
    table = rank.world.collectives
    frames = capture_frames()
    inst = table.instance(rank, g, "cpu")
    if not isinstance(inst, CpuRendezvous):
        mismatch(inst, g, rank, desc, frames)
    inst.register(rank, desc, sig, frames)
    inst.arrive(rank, [t.detach().clone() for t in reads])
    if inst.complete and inst.results is None:
        inst.results = compute([inst.payloads[r] for r in g.ranks])
        inst.done_time = max(inst.arrived.values()) + cost.collective_ns(kind, nbytes, len(g.ranks))
    if not inst.complete:
        rank.block(lambda: inst.done_time if inst.complete else None, lambda: inst.done_time, f"{kind} (gloo)")
    rank.host.clock = max(rank.host.clock, inst.done_time)
    rank.host.join_clock(inst.vc)
    for o, v in zip(outputs, inst.results[g.index[rank.rank]]):
        if v is not None:
            o.copy_(v.reshape(o.shape) if v.shape != o.shape else v)


def host_exchange(rank, g, what, payload):
    """An object collective: the host's pickled payload meets every member's (after the current stream's work,
    since objects travel as device tensors read back by the host). Returns the rendezvous (its payloads)."""
    table = rank.world.collectives
    cur = rank.current_stream()
    rank.wait_op(cur.record_marker(rank.host), what)
    inst = table.instance(rank, g, "object")
    if not isinstance(inst, HostRendezvous) or isinstance(inst, CpuRendezvous):
        mismatch(inst, g, rank, what, capture_frames())
    inst.register(rank, what, (what,), capture_frames())
    inst.arrive(rank, payload)
    if not inst.complete:
        rank.block(lambda: inst.done_time if inst.complete else None, lambda: inst.done_time, what)
    rank.host.clock = max(rank.host.clock, inst.done_time)
    rank.host.join_clock(inst.vc)
    return inst


def reduce_values(vals, opname):
    """Reduce every rank's value (in rank order) with the named op: SUM, AVG, PRODUCT, MAX, MIN, BAND, BOR, BXOR
    or PREMUL_SUM(factor)."""
    if opname.startswith("PREMUL_SUM("):
        f = float(opname[len("PREMUL_SUM("):-1])
        acc = vals[0] * f
        for v in vals[1:]:
            acc.add_(v * f)
        return acc.to(vals[0].dtype)
    acc = vals[0].clone()
    if opname in ("SUM", "AVG"):
        for v in vals[1:]:
            acc.add_(v)
        if opname == "AVG":
            if acc.is_floating_point():
                acc.div_(len(vals))
            else:
                acc = torch.div(acc, len(vals), rounding_mode="floor").to(acc.dtype)
    elif opname == "PRODUCT":
        for v in vals[1:]:
            acc.mul_(v)
    elif opname == "MAX":
        for v in vals[1:]:
            acc = torch.maximum(acc, v)
    elif opname == "MIN":
        for v in vals[1:]:
            acc = torch.minimum(acc, v)
    elif opname == "BAND":
        for v in vals[1:]:
            acc.bitwise_and_(v)
    elif opname == "BOR":
        for v in vals[1:]:
            acc.bitwise_or_(v)
    elif opname == "BXOR":
        for v in vals[1:]:
            acc.bitwise_xor_(v)
    else:
        raise SimulationError(f"reduce op {opname} is not supported by simdist")
    return acc
