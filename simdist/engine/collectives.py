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

Each rank keeps its own view of every instance; the participants' views meet through the messages of
simdist/engine/messages.py: Launched (call, clock) when a rank launches its side, Started when its stream reaches
it, Data (its inputs) when the last participant has started; Arrive for host rendezvous.
"""
from __future__ import annotations

import torch

from . import clocks, cost
from .errors import CollectiveMismatch, Deadlock, NcclError, SimulationError
from .frames import capture_frames, format_frame_tuples, user_frames
from .launch import launch
from .messages import Arrive, Data, Launched, Started


class Group:
    """A process group as one rank sees it (the torch face subclasses it with ProcessGroup's API). `key` names
    it the same on every rank; instances are (key, n) for this rank's n-th call on it."""

    def __init__(self, key, ranks, name=None):
        self.key = key
        self.ranks = list(ranks)
        self.index = {r: i for i, r in enumerate(self.ranks)}
        self.name = name or key
        self.calls = 0  # collectives this rank issued on this group so far
        self.comm_devices = []  # the devices this rank has an NCCL communicator of the group on, in creation order
        self.comm_inits = 0  # communicator creations this rank took part in (failed ones too)

    def size(self):
        return len(self.ranks)


class CollectiveTable:
    """One rank's groups and collective instances."""

    def __init__(self, rank, group_class=Group):
        self.owner = rank
        self.group_class = group_class
        n = rank.world.world_size
        self.world_group = group_class("world", range(n), "world")
        self.groups = {"world": self.world_group}
        self.new_groups = 0  # new_group calls so far (every rank makes every group, in the same order)
        self.instances = {}  # token (group key, seq) or ("comm", group key) -> rendezvous
        self.pending = {}  # token -> Collective whose own side started but whose timing is not known yet
        self.eager_init = False  # init_process_group(device_id=...): communicators made at once

    # --- groups -----------------------------------------------------------
    def new_group(self, ranks, desc=None):
        """The group made by this rank's next new_group call (every rank calls it, members or not)."""
        n = self.owner.world.world_size
        ranks = sorted(set(ranks)) if ranks is not None else list(range(n))
        for r in ranks:
            if not 0 <= r < n:
                raise ValueError(f"new_group: rank {r} is not in the world of size {n}")
        self.new_groups += 1
        key = f"pg{self.new_groups}"
        g = self.groups.get(key)
        if g is None:
            g = self.groups[key] = self.group_class(key, ranks, desc or key)
        elif g.ranks != ranks:
            raise CollectiveMismatch(f"new_group call #{self.new_groups}: rank {self.owner.rank} made a group of ranks "
                                     f"{ranks}, another rank made it of ranks {g.ranks}")
        return g

    def group_for(self, key, ranks, name):
        """The group a message names; made here if a peer got there first."""
        g = self.groups.get(key)
        if g is None:
            g = self.groups[key] = self.group_class(key, ranks, name)
        return g

    def p2p_pair(self, group, src, dst):
        """The two-rank group of the (src, dst) channel of `group`: src only sends on it and dst only receives,
        so the n-th send meets the n-th receive."""
        return self.group_for(f"p2p:{group.key}:{src}->{dst}", sorted((src, dst)), f"p2p:{src}->{dst}")

    # --- instances ------------------------------------------------------------
    def next_token(self, g):
        g.calls += 1
        return (g.key, g.calls)

    def instance(self, token, g, cls, kind):
        inst = self.instances.get(token)
        if inst is None:
            inst = self.instances[token] = cls(self, g, token, kind)
        return inst

    def ensure_communicator(self, rank, g, device):
        """ProcessGroupNCCL creates a group's communicator for a device at the first collective on that device
        (ncclCommInitRank, after a store exchange; its communicators are keyed by device), blocking the host until
        every member has arrived there, unless init_process_group got a device_id (then made eagerly). Ranks that
        first use two groups in different orders therefore hang on real GPUs; here they wait for each other and
        the run ends in a Deadlock naming it. NCCL refuses a communicator with two ranks on one GPU ("Duplicate
        GPU detected", ncclInvalidUsage): the simulated world is one node, so a device index is one GPU, and a
        script that never calls set_device puts every rank on cuda:0."""
        if g.key.startswith("p2p:") or device in g.comm_devices:
            return  # (P2P pairs: their set-up inside batched/grouped calls is not modelled)
        if self.eager_init and not g.comm_devices:
            g.comm_devices.append(device)
            return
        what = f"the NCCL communicator set-up of group {g.name} {g.ranks} on cuda:{device} (its first collective there)"
        inst = self.instance(("comm", g.key, g.comm_inits), g, HostRendezvous, "comm")
        g.comm_inits += 1
        host_arrive(rank, inst, what, ("comm",), device, 0)
        on = {}
        for r in g.ranks:
            other = on.setdefault(inst.payloads[r], r)
            if other != r:
                raise NcclError(f"NCCL error: invalid usage (ncclInvalidUsage) creating the communicator of group "
                                f"{g.name} {g.ranks}: Duplicate GPU detected: rank {r} and rank {other} both on "
                                f"CUDA device {inst.payloads[r]}. Each rank needs its own GPU: call "
                                "torch.cuda.set_device(local_rank) (or init_process_group(device_id=...)) before "
                                "the first collective.")
        g.comm_devices.append(device)  # (a failed communicator is not kept: the next call tries again)

    # --- messages ---------------------------------------------------------------
    def on_message(self, msg):
        if isinstance(msg, Arrive):
            g = self.group_for(msg.key[0] if msg.key[0] != "comm" else msg.key[1], msg.ranks, msg.group_name)
            cls = {"cpu": CpuRendezvous, "subworld": SubworldRendezvous}.get(msg.kind, HostRendezvous)
            inst = self.instances.get(msg.key)
            if inst is None:
                inst = self.instances[msg.key] = cls(self, g, msg.key, msg.kind)
            elif type(inst) is not cls:
                _mismatch_message(inst, msg)
            inst.on_arrive(msg)
            return
        inst = self.instances.get(msg.token)
        if isinstance(msg, Launched):
            g = self.group_for(msg.token[0], msg.ranks, msg.group_name)
            if inst is None:
                inst = self.instances[msg.token] = Collective(self, g, msg.token, msg.kind)
            elif not isinstance(inst, Collective):
                _mismatch_message(inst, msg)
            inst.on_launched(msg)
        elif isinstance(msg, Started):
            inst.on_started(msg)
        elif isinstance(msg, Data):
            inst.on_data(msg)
        else:
            raise SimulationError(f"internal: unknown message {msg!r}")

    def drain_limit(self):
        """Device work may not run past the start of an own collective side whose timing is unknown: the data of
        that collective moves when its last participant starts, which is not before."""
        if not self.pending:
            return None
        return min(c.starts[self.owner.rank] for c in self.pending.values())

    # --- the end of a run -------------------------------------------------------
    def pending_lines(self):
        """What this rank knows of instances that never completed (for the Deadlock report)."""
        lines = []
        for inst in self.instances.values():
            if inst.complete:
                continue
            joined = sorted(inst.calls)
            if inst.kind == "subworld":
                if self.owner.rank not in inst.calls:
                    continue  # another sub-world's membership exchange, this rank is none of its members
                lines.append(f"  {inst.calls[joined[0]][0]}: joined by global ranks {joined}, {len(joined)} of the "
                             f"{inst.expected} ranks it was made for")
                continue
            missing = [r for r in inst.group.ranks if r not in inst.calls]
            first = inst.calls[joined[0]] if joined else None
            where = ""
            if first is not None:
                where = f"\n      issued by rank {joined[0]} at:\n{format_frame_tuples(first[2], '      ')}"
            if missing:
                state = f"joined by ranks {joined}, never by ranks {missing}"
            else:
                state = ("joined by every rank, but some rank's side is queued on its stream behind work that "
                         "can never start (a cycle of waits between streams or ranks)")
            what = first[0] if first else inst.kind
            lines.append(f"  {what} #{inst.token[-1]} on group {inst.group.name}: {state}{where}")
        return lines


def pending_summary(lines):
    return ("pending collectives:\n" + "\n".join(lines)) if lines else ""


def check_finished(lines):
    if lines:
        raise Deadlock("the run ended with collectives some ranks never joined (on GPUs this hangs until the NCCL "
                       "watchdog fires):\n" + pending_summary(lines))


def _mismatch_text(inst, token_seq):
    return f"ranks issued different collectives as call #{token_seq} on group {inst.group.name} {inst.group.ranks}:"


def _mismatch_message(inst, msg):
    lines = [_mismatch_text(inst, inst.token[-1])]
    for r, (d2, _s, f2) in sorted(inst.calls.items()):
        lines.append(f"  rank {r}: {d2}\n{format_frame_tuples(f2, '      ')}")
    lines.append(f"  rank {msg.rank}: {msg.desc}\n{format_frame_tuples(msg.frames, '      ')}")
    raise CollectiveMismatch("\n".join(lines))


class Collective:
    """One rank's view of a device collective instance: every participant's call, clock, start and inputs, as
    they arrive; its own side's op, inputs and outputs."""

    def __init__(self, table, group, token, kind):
        self.table = table
        self.group = group
        self.token = token
        self.kind = kind
        self.calls = {}  # rank -> (description, signature, frames)
        self.clocks = {}  # rank -> full clock of its side at launch
        self.nbytes = {}
        self.extras = {}
        self.metas = {}
        self.starts = {}  # rank -> start time of its side
        self.data = {}  # rank -> its inputs, read at the rendezvous
        self.op = None  # this rank's side
        self.reads = ()  # this rank's input views (CPU views of the device bytes)
        self.outs = ()  # this rank's output views
        self.compute = None
        self.end = None
        self.snapped = False
        self.complete = False

    # --- this rank's side ---------------------------------------------------------
    def register_own(self, desc, sig, frames, meta, compute, reads, outs, nbytes):
        me = self.table.owner.rank
        for r, (d2, s2, f2) in self.calls.items():
            if s2 != sig:
                raise CollectiveMismatch(
                    f"{_mismatch_text(self, self.token[-1])}\n  rank {r}: {d2}\n{format_frame_tuples(f2, '      ')}\n"
                    f"  rank {me}: {desc}\n{format_frame_tuples(frames, '      ')}")
        self.calls[me] = (desc, sig, frames)
        self.metas[me] = meta
        self.compute = compute
        # CPU views only: holding the tensors would keep their blocks alive longer than NCCL does (on 2.8 a
        # synchronous collective neither records nor stashes its tensors, so a freed input can be reused at once)
        self.reads = [t._inner for t in reads]
        self.outs = [t._inner for t in outs]
        self.nbytes[me] = nbytes

    def arrive(self, rank, op):
        """Called by launch() once the side's op exists: tell the peers."""
        self.op = op
        me = rank.rank
        if rank.tokens.has_tokens(op.vc):  # expanded in place, once for every op sharing the stream's clock
            rank.tokens.merge(op.vc)
        clock = clocks.full_clock(op)
        self.clocks[me] = clock
        extra = rank.policy.collective_extra(self.token)
        self.extras[me] = extra
        desc, sig, frames = self.calls[me]
        rank.post(self.group.ranks, Launched(self.token, me, tuple(self.group.ranks), self.group.name, self.kind, desc,
                                             sig, frames, clock, self.nbytes[me], extra, self.metas[me]))
        self._maybe_resolve()

    def participant_started(self, op):
        """This rank's side got its start time (called by the event queue)."""
        rank = self.table.owner
        self.starts[rank.rank] = op.start
        self.table.pending[self.token] = self
        rank.post(self.group.ranks, Started(self.token, rank.rank, op.start))
        self._maybe_finish_timing()

    # --- the peers' sides ------------------------------------------------------------
    def on_launched(self, msg):
        me = self.table.owner.rank
        mine = self.calls.get(me)
        for r, (d2, s2, f2) in list(self.calls.items()):
            if s2 != msg.sig:
                first, second = (msg.rank, r) if msg.rank < r else (r, msg.rank)
                calls = dict(self.calls)
                calls[msg.rank] = (msg.desc, msg.sig, msg.frames)
                raise CollectiveMismatch(
                    f"{_mismatch_text(self, self.token[-1])}\n"
                    f"  rank {first}: {calls[first][0]}\n{format_frame_tuples(calls[first][2], '      ')}\n"
                    f"  rank {second}: {calls[second][0]}\n{format_frame_tuples(calls[second][2], '      ')}")
        del mine
        self.calls[msg.rank] = (msg.desc, msg.sig, msg.frames)
        self.clocks[msg.rank] = msg.clock
        self.nbytes[msg.rank] = msg.nbytes
        self.extras[msg.rank] = msg.extra
        self.metas[msg.rank] = msg.meta
        self._maybe_resolve()

    def on_started(self, msg):
        self.starts[msg.rank] = msg.start
        self._maybe_finish_timing()

    def on_data(self, msg):
        self.data[msg.rank] = msg.tensors

    # --- joining, timing, data -----------------------------------------------------------
    def _maybe_resolve(self):
        """Once every participant launched: the collective's token stands for their joined clocks."""
        if len(self.clocks) == len(self.group.ranks):
            ranks = self.group.ranks
            full = dict(self.clocks[ranks[0]])
            for r in ranks[1:]:
                clocks.merge_into(full, self.clocks[r])
            self.table.owner.tokens.resolve(self.token, full)

    def _maybe_finish_timing(self):
        if self.op is None or len(self.starts) != len(self.group.ranks) or self.end is not None:
            return
        rank = self.table.owner
        queue = rank.queue
        n = len(self.group.ranks)
        start = max(self.starts.values())
        base = cost.collective_ns(self.kind, max(self.nbytes.values()), n)
        dur = rank.policy.collective(self.token, base, [self.extras[r] for r in self.group.ranks])
        rank.schedule_log[self.token] = dur
        self.end = start + max(1, dur)
        self.table.pending.pop(self.token, None)
        # NCCL kernels wait for their peers, so the data moves once the last rank has started: every input is read
        # at that moment, and every output written at the end
        queue.push(start, _Snapshot(self))
        self.op.end = self.end
        queue.push(self.end, _Execute(self))
        queue.resolved(self.op)

    def take_snapshot(self):
        rank = self.table.owner
        self.snapped = True
        mine = [t.clone() for t in self.reads]
        self.data[rank.rank] = mine
        rank.post(self.group.ranks, Data(self.token, rank.rank, mine))

    def ready(self):
        return len(self.data) == len(self.group.ranks)

    def execute(self):
        rank = self.table.owner
        self.complete = True
        order = self.group.ranks
        results = self.compute([self.data[r] for r in order], [self.metas.get(r) for r in order])
        vals = results[self.group.index[rank.rank]]
        outs = self.outs
        op = self.op

        def fn():
            for o, v in zip(outs, vals):
                if v is not None:
                    o.copy_(v.reshape(o.shape) if v.shape != o.shape else v)
        op.fn = fn
        rank.detector.execute(op)
        op.fn = None
        op.watches = None
        rank.ops_log.append(op)
        # drop every tensor reference: the instance stays in the table for reports
        self.data = {}
        self.reads = self.outs = ()
        self.compute = None


class _Snapshot:
    """Queue item: this rank's side reads its inputs (when the last participant has started)."""

    __slots__ = ("coll",)

    def __init__(self, coll):
        self.coll = coll

    def ready(self):
        return True

    def execute(self):
        self.coll.take_snapshot()


class _Execute:
    """Queue item: this rank's side writes its outputs (it needs every participant's inputs)."""

    __slots__ = ("coll",)

    def __init__(self, coll):
        self.coll = coll

    def ready(self):
        return self.coll.ready()

    def execute(self):
        self.coll.execute()


class HostRendezvous:
    """A rendezvous of hosts (object collectives, NCCL communicator set-up): complete when every member's host
    has arrived, at the latest arrival plus the exchange's cost; each member learns the others' payloads."""

    def __init__(self, table, group, key, kind):
        self.table = table
        self.group = group
        self.token = key
        self.kind = kind
        self.calls = {}  # rank -> (description, signature, frames)
        self.arrivals = {}  # rank -> host time
        self.payloads = {}
        self.vc = {}
        self.complete = False
        self.done_time = None

    def on_arrive(self, msg):
        for r, (d2, s2, f2) in self.calls.items():
            if s2 != msg.sig:
                _mismatch_message(self, msg)
        self.calls[msg.rank] = (msg.desc, msg.sig, msg.frames)
        self.arrivals[msg.rank] = msg.time
        self.payloads[msg.rank] = msg.payload
        self.vc = clocks.join(self.vc, msg.clock)
        self._maybe_complete()

    def _maybe_complete(self):
        if len(self.arrivals) == len(self.group.ranks) and not self.complete:
            nbytes = sum(_payload_bytes(p) for p in self.payloads.values())
            self.done_time = max(self.arrivals.values()) + cost.collective_ns("all_gather", nbytes, len(self.arrivals))
            self.complete = True


class SubworldRendezvous(HostRendezvous):
    """The members of a group a program made over a rendezvous of its own (OpenRLHF's / SGLang's weight-update
    group: `rendezvous("tcp://...", rank_offset + r, n)` then `_new_process_group_helper(n, group_rank, [], ...)`):
    its ranks number themselves, so which global ranks they are is learnt as a real job learns it, through the
    store, when each member's backend first needs its communicator. Every rank of the world is told of each arrival
    (the members are not known before); complete when `expected` hosts have arrived."""

    def __init__(self, table, group, key, kind):
        super().__init__(table, group, key, kind)
        self.expected = int(key[0].rsplit(":", 1)[1])

    def _maybe_complete(self):
        if len(self.arrivals) == self.expected and not self.complete:
            self.done_time = max(self.arrivals.values()) + cost.collective_ns("all_gather", 8 * self.expected,
                                                                              self.expected)
            self.complete = True


def subworld_members(rank, name, group_rank, size, desc):
    """Global ranks, in group-rank order, of the `size`-rank group named `name` that this rank joins as
    `group_rank` (SubworldRendezvous); the host waits for every member, as ncclCommInitRank's store exchange does."""
    table = rank.collectives
    n = rank.world.world_size
    seen = table.subworlds = getattr(table, "subworlds", {})
    k = seen[name, size] = seen.get((name, size), 0) + 1
    key = f"subworld:{name}:{size}"
    g = table.group_for(key, list(range(n)), f"{name} (its members unknown yet)")
    inst = table.instance((key, k), g, SubworldRendezvous, "subworld")
    inst = host_arrive(rank, inst, desc, ("subworld", size), int(group_rank), 0)
    by_group_rank = {}
    for r, gr in sorted(inst.payloads.items()):
        if gr in by_group_rank:
            raise CollectiveMismatch(f"{desc}: global ranks {by_group_rank[gr]} and {r} both joined as group rank {gr} "
                                     f"(a real NCCL communicator set-up with a duplicate rank fails or hangs)")
        by_group_rank[gr] = r
    return [by_group_rank[i] for i in range(size)]


class CpuRendezvous(HostRendezvous):
    """A gloo collective on CPU tensors: synchronous on the host. Every rank's inputs are read when the last rank
    arrives and each rank's outputs are written before its call returns."""


def _payload_bytes(p):
    if isinstance(p, (list, tuple)):
        return sum(t.numel() * t.element_size() for t in p if isinstance(t, torch.Tensor))
    return 0


def host_arrive(rank, inst, desc, sig, payload, nbytes_hint):
    """This rank's host arrives at a host rendezvous and waits until every member has."""
    table = rank.collectives
    frames = tuple(user_frames(capture_frames()))
    me = rank.rank
    for r, (d2, s2, f2) in inst.calls.items():
        if s2 != sig:
            raise CollectiveMismatch(f"{_mismatch_text(inst, inst.token[-1])}\n  rank {r}: {d2}\n"
                                     f"{format_frame_tuples(f2, '      ')}\n  rank {me}: {desc}\n"
                                     f"{format_frame_tuples(frames, '      ')}")
    if rank.tokens.has_tokens(rank.host.vc):  # in place (sound: the host knows it), then a copy to send
        rank.tokens.merge(rank.host.vc)
    clock = dict(rank.host.vc)
    inst.calls[me] = (desc, sig, frames)
    inst.arrivals[me] = rank.host.clock
    inst.payloads[me] = payload
    inst.vc = clocks.join(inst.vc, clock)
    rank.post(inst.group.ranks, Arrive(inst.token, me, tuple(inst.group.ranks), inst.group.name, inst.kind, desc, sig,
                                       frames, rank.host.clock, clock, payload))
    inst._maybe_complete()
    if not inst.complete:
        rank.block(lambda: inst.done_time if inst.complete else None, lambda: inst.done_time, desc)
    rank.host.clock = max(rank.host.clock, inst.done_time)
    rank.host.join_clock(inst.vc)
    del table
    return inst


def launch_collective(rank, g, kind, desc, sig, reads, writes, compute, async_op, nbytes, stream_key=None, meta=None):
    """One rank's side of a device collective on group g: rendezvous, matching, the stream it runs on per the
    NCCL profile, and its accesses. compute(inputs per rank, metas per rank) -> outputs per rank.
    Returns (op, the stream it runs on, the current stream, whether that is the internal NCCL stream)."""
    world = rank.world
    table = rank.collectives
    tensors = list(reads) + list(writes)
    dev = rank.device(tensors[0]._dev.index) if tensors else rank.device()
    other = next((o._dev.index for o in tensors if o._dev.index != dev.index), None)
    if other is not None:
        # ProcessGroupNCCL takes the communicator's device from the input tensor; NCCL's argument check then
        # refuses a buffer on another GPU (src/misc/argcheck.cc CudaPtrCheck: ncclInvalidArgument)
        raise NcclError(f"NCCL error: invalid argument (ncclInvalidArgument) in {desc} on group {g.name}: a buffer "
                        f"allocated on device {other} mismatches with the NCCL device {dev.index} (the input's): "
                        "every tensor of a collective must be on the rank's one GPU")
    table.ensure_communicator(rank, g, dev.index)
    token = table.next_token(g)
    inst = table.instance(token, g, Collective, kind)
    frames = capture_frames()
    frame_tuples = tuple(user_frames(frames))
    if not isinstance(inst, Collective) or inst.kind != kind:
        other = next(iter(inst.calls.items()), None)
        lines = [_mismatch_text(inst, token[-1])]
        if other is not None:
            lines.append(f"  rank {other[0]}: {other[1][0]}\n{format_frame_tuples(other[1][2], '      ')}")
        lines.append(f"  rank {rank.rank}: {desc}\n{format_frame_tuples(frame_tuples, '      ')}")
        raise CollectiveMismatch("\n".join(lines))
    inst.register_own(desc, sig, frame_tuples, meta, compute, reads, writes, nbytes)
    host = rank.host
    cur = rank.current_stream(dev.index)
    on_side = world.nccl_profile == "2.7" or async_op
    if on_side:
        if rank.tokens.has_tokens(cur.vc):
            # in place, as ordering questions do (every op sharing the clock came after those collectives): the
            # caller's stream would otherwise hand every earlier collective's token to each new side to expand again
            rank.tokens.merge(cur.vc)
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
    table = rank.collectives
    token = table.next_token(g)
    inst = table.instance(token, g, CpuRendezvous, "cpu")
    if not isinstance(inst, CpuRendezvous):
        raise CollectiveMismatch(f"{_mismatch_text(inst, token[-1])} rank {rank.rank} issued a gloo {desc}, "
                                 f"another rank a {inst.kind} collective")
    host_arrive(rank, inst, desc, sig, [t.detach().clone() for t in reads], nbytes)
    results = compute([inst.payloads[r] for r in g.ranks], [None] * len(g.ranks))
    for o, v in zip(outputs, results[g.index[rank.rank]]):
        if v is not None:
            o.copy_(v.reshape(o.shape) if v.shape != o.shape else v)


_GLOO_MAX_SEGMENT_BYTES = 1024 * 1024  # gloo/reduce.h ReduceOptions::kMaxSegmentSize (torch sets no other)


def _gloo_pairwise(opname):
    """gloo's reduction function c = f(a, b) (a: the rank's own element, b: the one received), gloo/math.h and
    ProcessGroupGloo.cpp band / bor / bxor: std::max(a, b) is `a < b ? b : a`, so a NaN spreads only from a."""
    if opname in ("SUM", "SUM_THEN_DIV"):
        return lambda a, b: a + b
    if opname == "PRODUCT":
        return lambda a, b: a * b
    if opname == "MAX":
        return lambda a, b: torch.where(a < b, b, a)
    if opname == "MIN":
        return lambda a, b: torch.where(b < a, b, a)
    if opname == "BAND":
        return lambda a, b: a & b
    if opname == "BOR":
        return lambda a, b: a | b
    if opname == "BXOR":
        return lambda a, b: a ^ b
    raise SimulationError(f"gloo reduce op {opname} is not supported by simdist")


def gloo_reduce_values(vals, root, opname):
    """Every rank's buffer after ProcessGroupGloo's reduce (in rank order of the group), which runs gloo::reduce
    (gloo/reduce.cc) with the tensor as both input and output: a ring reduce-scatter in segments (each rank sends
    to rank - 1, and reduces what it receives from rank + 1 into its own buffer), then every rank sends the chunk
    it holds to the root. The root's result is reduced in the ring's order, not in rank order, and the other
    ranks' buffers are left holding partial reductions (measured with torch 2.13's gloo at 2 to 5 ranks: equal
    bit for bit). AVG (torch >= 2.8) divides every rank's buffer by the group size afterwards."""
    P = len(vals)
    bufs = [v.clone() for v in vals]
    flats = [torch.view_as_real(b).reshape(-1) if b.is_complex() else b.reshape(-1) for b in bufs]
    E = flats[0].numel()
    if E and P > 1:
        f = _gloo_pairwise(opname)
        es = flats[0].element_size()
        total = E * es
        max_seg = es * max(1, _GLOO_MAX_SEGMENT_BYTES // es)
        seg_bytes = -(-min((total + 2 * P - 1) // (2 * P), max_seg) // es) * es
        nseg = -(-max(-(-total // seg_bytes), 2 * P) // P) * P
        per_rank = nseg // P
        seg = seg_bytes // es
        span = nseg * seg

        def offsets(r, i):
            send = (((r + 1) * per_rank) + i) * seg % span
            recv = (((r + 2) * per_rank) + i) * seg % span
            return send, min(seg, E - send), recv, min(seg, E - recv)

        in_flight = {}
        for i in range(nseg):
            if i >= 2:
                for r in range(P):
                    _, _, ro, rl = offsets(r, i - 2)
                    if rl > 0:
                        part = flats[r][ro:ro + rl]
                        part.copy_(f(part.clone(), in_flight.pop((r, i - 2))))
            if i < nseg - 2:
                for r in range(P):
                    so, sl, _, _ = offsets(r, i)
                    if sl > 0:
                        in_flight[((r - 1) % P, i)] = flats[r][so:so + sl].clone()
        chunk = per_rank * seg
        for r in range(P):
            o = r * chunk
            if r != root and o < E:
                flats[root][o:o + min(chunk, E - o)] = flats[r][o:o + min(chunk, E - o)]
    if opname == "SUM_THEN_DIV":  # ProcessGroupGloo AsyncReduceWork: `tensors[0] /= context_->size` on every rank
        for b in bufs:
            b.div_(P)
    return bufs


def gloo_allreduce_values(vals, opname):
    """The value every rank holds after ProcessGroupGloo's allreduce of one tensor per rank: gloo::allreduce
    (gloo/allreduce.cc, the ring: the default algorithm) reduce-scatters in the same segments as gloo::reduce and
    all-gathers the reduced chunks, so every rank ends with what gloo::reduce leaves on its root (the same for any
    root: each chunk is reduced in its ring positions' order). AVG (torch >= 2.8): that sum divided by the group
    size. Measured against torch 2.13's gloo at 3 to 5 ranks and 1 to 700000 elements: equal bit for bit, where the
    rank-order sum differed from 3 ranks on (tests/test_g_series.py)."""
    if len(vals) == 1:
        return vals[0].clone()
    return gloo_reduce_values(vals, 0, opname)[0]


def reduce_values(vals, opname):
    """Reduce every rank's value (in rank order) with the named op: SUM, AVG, PRODUCT, MAX, MIN, BAND, BOR, BXOR,
    PREMUL_SUM(factor) or SUM_THEN_DIV (gloo's AVG)."""
    if opname.startswith("PREMUL_SUM("):
        f = float(opname[len("PREMUL_SUM("):-1])
        acc = vals[0] * f
        for v in vals[1:]:
            acc.add_(v * f)
        return acc.to(vals[0].dtype)
    if opname == "AVG" and (vals[0].is_floating_point() or vals[0].is_complex()):
        # NCCL's ncclAvg on floats is a pre-multiplied sum by 1/nranks (enqueue.cc hostToDevRedOp: ncclDevPreMulSum),
        # not a sum then a division: fp16 values near the top of the range average without overflowing. The factor
        # is float(1.0 / nRanks) converted to the data's type (__float2half / __float2bfloat16; a double for
        # doubles): at 3 ranks fp16 multiplies by 0.33325195, not 1/3
        real = vals[0].real.dtype if vals[0].is_complex() else vals[0].dtype
        factor = 1.0 / len(vals)  # (doubles: f64 = 1.0 / nRanks)
        if real != torch.float64:
            factor = torch.tensor(factor, dtype=torch.float32).to(real).item()
        return reduce_values(vals, f"PREMUL_SUM({factor!r})")
    acc = vals[0].clone()
    if opname == "SUM_THEN_DIV":  # gloo's AVG (floats): the sum in rank order, then divided by the group size
        for v in vals[1:]:
            acc.add_(v)
        return acc.div_(len(vals))
    if opname in ("SUM", "AVG"):
        for v in vals[1:]:
            acc.add_(v)
        if opname == "AVG":  # integers: NCCL's FuncSumPostDiv, C division of the sum (truncation toward zero)
            acc = torch.div(acc, len(vals), rounding_mode="trunc").to(acc.dtype)
    elif opname == "PRODUCT":
        for v in vals[1:]:
            acc.mul_(v)
    elif opname in ("MAX", "MIN"):
        # NCCL's FuncMinMax on floats is fmaxf / fminf (fmax / fmin for doubles, __hmax / __hmin for half and
        # bfloat16: src/device/reduce_kernel.h): a NaN loses to a number, whatever the ring's order
        floating = acc.is_floating_point()
        f = (torch.fmax if floating else torch.maximum) if opname == "MAX" else (torch.fmin if floating else torch.minimum)
        for v in vals[1:]:
            acc = f(acc, v)
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
