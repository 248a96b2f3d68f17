"""torch.distributed with the NCCL backend, simulated: process groups, collectives, P2P.

Stream semantics per profile (DESIGN.md "torch.distributed semantics"; FACTS.md;
torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp):
- "2.7": every collective runs on the group's internal NCCL stream, which first
  waits on the caller's current stream; inputs and outputs are record_stream-ed
  on it (or, with TORCH_NCCL_AVOID_RECORD_STREAMS=1, stashed until wait());
  async_op=False makes the current stream wait on the end (host not blocked);
- "2.8": async_op=False runs on the current stream (nothing recorded or stashed);
  async_op=True runs on the internal stream and stashes its tensors.
- Work.wait() makes the current stream wait; barrier() also blocks the host.
Ranks meet at a rendezvous keyed by (group, sequence number): a collective
starts on each rank at its stream time and ends at the latest start plus its
cost; it reads every input when the last rank has started (NCCL kernels spin
until their peers arrive) and writes the outputs at the end.
Gathers and broadcasts are bit-exact; reductions add in rank order.
Cross-rank checks follow TORCH_DISTRIBUTED_DEBUG=DETAIL: op, sizes, dtypes and
root must match, else CollectiveMismatch naming every rank's call.
"""
from __future__ import annotations

import pickle

import torch
import torch.distributed as _dist

from ..engine import collectives as engine
from ..engine.collectives import Group
from ..engine.context import current_rank
from ..engine.errors import SimulationError, UnsupportedOperation
from .tensor import SimTensor

c10d = _dist.distributed_c10d


def _rank():
    rs = current_rank()
    if rs is None:
        raise SimulationError("torch.distributed was used outside a simulated rank")
    return rs


class ProcessGroup(Group):
    """A simulated NCCL process group (one object shared by its member ranks) with torch's ProcessGroup API."""

    def __init__(self, key, ranks, name=None):
        super().__init__(key, ranks, name)
        self.group_name = self.name
        self.backend = None  # None: the default group's

    def rank(self):
        rs = current_rank()
        return self.index.get(rs.rank, -1) if rs is not None else -1

    def group_desc(self):
        return self.name

    def __repr__(self):
        return f"<simdist ProcessGroup {self.name} ranks={self.ranks}>"

    def _get_backend_name(self):
        return "nccl"


# init_process_group() with no backend makes only the accelerator's backend (torch's "undefined" backend resolved
# through the CUDA accelerator: NCCL), so CPU tensors need an explicit "gloo" or "cpu:gloo,cuda:nccl". Measured on
# torch 2.11 (docs/gpu-programs-2026-11-29.md, r29) and read in torch 2.13's BackendConfig.
DEFAULT_BACKEND = "nccl"


# --- the collectives ------------------------------------------------------------------
_WORLD_SENTINEL = object()


def _root(g, rank, group_rank):
    """The global rank of a collective's root, given as a global rank or as a rank within the group."""
    return rank if rank is not None else g.ranks[group_rank or 0]


def _redop_name(op, tensor=None):
    """The reduce op's name for signatures and for _reduce: 'SUM', 'MAX'..., 'PREMUL_SUM(0.5)'.

    A ReduceOp made by dist._make_nccl_premul_sum carries its factor. NCCL has no bitwise reductions
    (ProcessGroupNCCL getNcclReduceOp: "Cannot use ReduceOp.BAND with NCCL"); gloo (CPU tensors) has them."""
    if op is None:
        return "SUM"
    kind = getattr(op, "op", None)  # a ReduceOp instance (RedOpType inside); RedOpType has .name
    n = getattr(kind if kind is not None else op, "name", None) or str(kind if kind is not None else op)
    n = n.split(".")[-1].upper()
    if n == "PREMUL_SUM":
        f = getattr(op, "factor", None)
        if f is None:
            raise UnsupportedOperation("ReduceOp.PREMUL_SUM needs a factor: use dist._make_nccl_premul_sum(f)")
        f = f.item() if isinstance(f, torch.Tensor) else float(f)
        return f"PREMUL_SUM({f!r})"
    if n in ("BAND", "BOR", "BXOR") and tensor is not None and tensor.device.type == "cuda":
        raise ValueError(f"Cannot use ReduceOp.{n} with NCCL")
    if n not in ("SUM", "AVG", "PRODUCT", "MAX", "MIN", "BAND", "BOR", "BXOR"):
        raise UnsupportedOperation(f"reduce op {n} is not modelled by simdist")
    return n


def _sig_t(t):
    return (tuple(t.shape), str(t.dtype).replace("torch.", ""))


def _desc(kind, tensors, extra=""):
    ts = ", ".join(f"{d}{list(s)}" for s, d in (_sig_t(t) for t in tensors))
    return f"{kind}({ts}{', ' + extra if extra else ''})"


def _check_tensor(rs, t, what):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{what}: expected a tensor, got {type(t).__name__}")
    if not isinstance(t, SimTensor):
        if not t.is_contiguous():
            raise ValueError(f"{what}: Tensors must be contiguous")
        return t  # a CPU tensor: a gloo collective if the group has gloo (_launch_collective)
    if t._dev.rank != rs.rank:
        raise SimulationError(f"{what}: rank {rs.rank} passed a tensor of rank {t._dev.rank}")
    if not t.is_contiguous():
        raise ValueError(f"{what}: Tensors must be contiguous (got {t.dtype}{list(t.shape)} with strides "
                         f"{list(t.stride())}), as ProcessGroupNCCL requires")
    return t


class Work:
    """The handle of an async collective (c10d Work)."""

    def __init__(self, rs, marker, stash, outputs, host_blocking=False):
        self._rs = rs
        self._marker = marker
        self._stash = stash
        self._outputs = outputs
        self._host_blocking = host_blocking

    def wait(self, timeout=None):
        rs = _rank()
        if self._marker is not None:
            rs.current_stream().wait_marker(rs.host, self._marker)
            if self._host_blocking:
                rs.wait_op(self._marker, "barrier()")
        self._stash = None
        return True

    synchronize = wait

    def is_completed(self):
        rs = _rank()
        m = self._marker
        if m is None or (m.end is not None and m.end <= rs.host.clock):
            if m is not None:
                rs.host.join_op(m)
            return True
        rs.poll_pending(m, "Work.is_completed()")
        return False

    def is_success(self):
        return self.is_completed()

    def exception(self):
        return None

    def result(self):
        return list(self._outputs)

    def get_future(self):
        return _Future(self)


class _Future:
    def __init__(self, work):
        self.work = work

    def wait(self):
        self.work.wait()
        return self.work.result()

    def value(self):
        return self.work.result()

    def done(self):
        return self.work.is_completed()

    def then(self, cb):
        f = _Future(self.work)
        f._cb = cb
        f.wait = lambda: cb(self) if self.wait() is not None else None
        return f


def _launch_collective(rs, g, kind, desc, sig, inputs, outputs, compute, async_op, reads=None, writes=None,
                       nbytes=None, stream_key=None, meta=None):
    """Dispatch one collective call: gloo semantics for CPU tensors, NCCL's (simdist/engine/collectives.py)
    for device tensors; returns the Work for async_op=True, else None. compute(inputs per rank) gives the outputs
    per rank (compute(inputs, metas) when this rank passes a `meta` every rank's is needed for)."""
    if meta is None:
        compute = _ignore_metas(compute)
    world = rs.world
    tensors = list(inputs) + list(outputs)
    reads = reads if reads is not None else inputs
    nb = nbytes if nbytes is not None else sum(t.numel() * t.element_size() for t in inputs)
    n_cpu = sum(1 for t in tensors if not isinstance(t, SimTensor))
    if n_cpu:
        if n_cpu != len(tensors):
            raise ValueError(f"{kind}: CPU and CUDA tensors mixed in one collective")
        backend = _backend_of(g)
        if "gloo" not in backend:
            raise RuntimeError(f"No backend type associated with device type cpu (group {g.name} has backend "
                               f"'{backend}'; a CPU tensor needs gloo, e.g. init_process_group('cpu:gloo,cuda:nccl'))")
        engine.host_collective(rs, g, kind, desc, sig, reads, outputs, compute, nb)
        return Work(rs, None, None, list(outputs)) if async_op else None
    op, stream, cur, on_side = engine.launch_collective(
        rs, g, kind, desc, sig, reads, writes if writes is not None else outputs, compute, async_op, nb, stream_key,
        meta)
    host = rs.host
    stash = None
    if on_side:
        if world.nccl_profile == "2.7" and not world.avoid_record_streams:
            for t in tensors:
                t._alloc.record_stream(stream)
        else:
            stash = tensors
    marker = stream.record_marker(host) if on_side else None
    if async_op:
        if marker is None:
            marker = stream.record_marker(host)
        return Work(rs, marker, stash, outputs)
    if on_side:
        cur.wait_marker(host, marker)
    return None


def _ignore_metas(compute):
    def with_metas(vals, metas):
        return compute(vals)
    return with_metas


def _resolve(group):
    rs = _rank()
    table = rs.collectives
    if group is None or group is c10d.GroupMember.WORLD or group is _WORLD_SENTINEL:
        return table.world_group
    if group is c10d.GroupMember.NON_GROUP_MEMBER:
        raise _NotMember("a collective")
    if isinstance(group, ProcessGroup):
        return group
    raise SimulationError(f"unknown process group {group!r}: pass a group made by torch.distributed.new_group "
                          "inside the simulated run")


def _member(rs, group, what):
    if group is c10d.GroupMember.NON_GROUP_MEMBER:
        raise _NotMember(what)
    g = _resolve(group)
    if rs.rank not in g.index:
        raise _NotMember(what)
    return g


class _NotMember(Exception):
    """A collective called on a group the rank is not in (see _skip_if_not_member)."""


def _skip_if_not_member(fn):
    """As torch.distributed does: a collective on a group the calling rank is not in is a no-op with a warning
    (distributed_c10d._rank_not_in_group / _warn_not_in_group), not an error."""
    import functools
    import warnings

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except _NotMember as e:
            warnings.warn(f"Running {e.args[0]} on global rank {_rank().rank} which does not belong to the given "
                          "group.", stacklevel=2)
            return None
    return wrapper


@_skip_if_not_member
def all_reduce(tensor, op=None, group=None, async_op=False):
    rs = _rank()
    g = _member(rs, group, "all_reduce")
    t = _check_tensor(rs, tensor, "all_reduce")
    name = _redop_name(op, t)
    return _launch_collective(rs, g, "all_reduce", _desc("all_reduce", [t], name), ("all_reduce", _sig_t(t), name),
                              [t], [t], lambda vals: [[engine.reduce_values([v[0] for v in vals], name)]] * len(vals), async_op)


@_skip_if_not_member
def broadcast(tensor, src=None, group=None, async_op=False, group_src=None):
    rs = _rank()
    g = _member(rs, group, "broadcast")
    t = _check_tensor(rs, tensor, "broadcast")
    root = _root(g, src, group_src)
    if root not in g.index:
        raise ValueError(f"broadcast: src rank {root} is not in group {g.name} {g.ranks}")
    i = g.index[root]
    is_root = rs.rank == root
    return _launch_collective(
        rs, g, "broadcast", _desc("broadcast", [t], f"src={root}"), ("broadcast", _sig_t(t), root), [t], [t],
        lambda vals: [[vals[i][0]] if j != i else [None] for j in range(len(vals))], async_op,
        reads=[t] if is_root else [], writes=[] if is_root else [t],
        nbytes=t.numel() * t.element_size())


@_skip_if_not_member
def reduce(tensor, dst=None, op=None, group=None, async_op=False, group_dst=None):
    rs = _rank()
    g = _member(rs, group, "reduce")
    t = _check_tensor(rs, tensor, "reduce")
    root = _root(g, dst, group_dst)
    i = g.index[root]
    name = _redop_name(op, t)
    return _launch_collective(
        rs, g, "reduce", _desc("reduce", [t], f"dst={root}, {name}"), ("reduce", _sig_t(t), root, name), [t], [t],
        lambda vals: [[engine.reduce_values([v[0] for v in vals], name)] if j == i else [None] for j in range(len(vals))],
        async_op, writes=[t] if rs.rank == root else [])


@_skip_if_not_member
def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False):
    rs = _rank()
    g = _member(rs, group, "all_gather_into_tensor")
    o = _check_tensor(rs, output_tensor, "all_gather_into_tensor")
    i = _check_tensor(rs, input_tensor, "all_gather_into_tensor")
    n = g.size()
    if o.numel() != n * i.numel() or o.dtype != i.dtype:
        raise ValueError(f"all_gather_into_tensor: output {o.dtype}{list(o.shape)} must hold {n} x input "
                         f"{i.dtype}{list(i.shape)}")
    return _launch_collective(
        rs, g, "all_gather", _desc("all_gather_into_tensor", [o, i]), ("all_gather_into_tensor", _sig_t(i)), [i], [o],
        lambda vals: [[torch.cat([v[0].reshape(-1) for v in vals])]] * n, async_op,
        nbytes=o.numel() * o.element_size())


@_skip_if_not_member
def all_gather(tensor_list, tensor, group=None, async_op=False):
    rs = _rank()
    g = _member(rs, group, "all_gather")
    t = _check_tensor(rs, tensor, "all_gather")
    outs = [_check_tensor(rs, x, "all_gather") for x in tensor_list]
    n = g.size()
    if len(outs) != n:
        raise ValueError(f"all_gather: tensor_list has {len(outs)} tensors, group {g.name} has {n} ranks")
    mine = outs[g.index[rs.rank]]
    for x in outs:
        if x.dtype != t.dtype:
            raise ValueError(f"all_gather: output {x.dtype}{list(x.shape)} does not match input {t.dtype}{list(t.shape)}")
    if mine.numel() != t.numel():
        raise ValueError(f"all_gather: this rank's output slot {list(mine.shape)} does not match its input "
                         f"{list(t.shape)}")
    # outputs of different sizes are allowed (ProcessGroupNCCL then broadcasts each rank's input in turn): the
    # signature is the list of output shapes, which every rank must agree on
    return _launch_collective(
        rs, g, "all_gather", _desc("all_gather", [t]), ("all_gather", tuple(_sig_t(x) for x in outs)), [t], outs,
        lambda vals: [[v[0] for v in vals]] * n, async_op, nbytes=sum(x.numel() * x.element_size() for x in outs))


@_skip_if_not_member
def reduce_scatter_tensor(output, input, op=None, group=None, async_op=False):
    rs = _rank()
    g = _member(rs, group, "reduce_scatter_tensor")
    o = _check_tensor(rs, output, "reduce_scatter_tensor")
    i = _check_tensor(rs, input, "reduce_scatter_tensor")
    n = g.size()
    if i.numel() != n * o.numel():
        raise ValueError(f"reduce_scatter_tensor: input {list(i.shape)} must be {n} x output {list(o.shape)}")
    name = _redop_name(op, i)

    def compute(vals):
        flat = [v[0].reshape(n, -1) for v in vals]
        return [[engine.reduce_values([f[j] for f in flat], name)] for j in range(n)]
    return _launch_collective(rs, g, "reduce_scatter", _desc("reduce_scatter_tensor", [o, i], name),
                              ("reduce_scatter_tensor", _sig_t(i), name), [i], [o], compute, async_op,
                              nbytes=i.numel() * i.element_size())


@_skip_if_not_member
def reduce_scatter(output, input_list, op=None, group=None, async_op=False):
    rs = _rank()
    g = _member(rs, group, "reduce_scatter")
    o = _check_tensor(rs, output, "reduce_scatter")
    ins = [_check_tensor(rs, x, "reduce_scatter") for x in input_list]
    n = g.size()
    if len(ins) != n:
        raise ValueError(f"reduce_scatter: input_list has {len(ins)} tensors for {n} ranks")
    name = _redop_name(op, o)
    if ins[g.index[rs.rank]].numel() != o.numel():
        raise ValueError(f"reduce_scatter: output {list(o.shape)} does not match this rank's input slot "
                         f"{list(ins[g.index[rs.rank]].shape)}")
    return _launch_collective(  # inputs of different sizes are allowed (a coalesced group of reduces in NCCL)
        rs, g, "reduce_scatter", _desc("reduce_scatter", [o], name),
        ("reduce_scatter", tuple(_sig_t(x) for x in ins), name), ins, [o],
        lambda vals: [[engine.reduce_values([v[j] for v in vals], name)] for j in range(n)], async_op)


@_skip_if_not_member
def all_to_all_single(output, input, output_split_sizes=None, input_split_sizes=None, group=None, async_op=False):
    rs = _rank()
    g = _member(rs, group, "all_to_all_single")
    o = _check_tensor(rs, output, "all_to_all_single")
    i = _check_tensor(rs, input, "all_to_all_single")
    n = g.size()
    if input_split_sizes is None:
        if i.shape[0] % n:
            raise ValueError(f"all_to_all_single: dim 0 of input ({i.shape[0]}) is not divisible by {n} ranks")
        input_split_sizes = [i.shape[0] // n] * n
    if output_split_sizes is None:
        output_split_sizes = [o.shape[0] // n] * n
    splits = (list(input_split_sizes), list(output_split_sizes))

    def compute(vals, metas):  # metas: every rank's (input splits, output splits)
        chunks = [list(torch.split(vals[j][0], metas[j][0])) for j in range(n)]
        out = []
        for j in range(n):
            for k in range(n):
                if chunks[k][j].shape[0] != metas[j][1][k]:
                    raise SimulationError(f"all_to_all_single: rank {g.ranks[k]} sends {chunks[k][j].shape[0]} rows "
                                          f"to rank {g.ranks[j]}, which expects {metas[j][1][k]}")
            out.append([torch.cat([chunks[k][j] for k in range(n)])])
        return out
    return _launch_collective(rs, g, "all_to_all", _desc("all_to_all_single", [o, i]),
                              ("all_to_all_single", str(i.dtype)), [i], [o], compute, async_op, meta=splits)


@_skip_if_not_member
def all_to_all(output_tensor_list, input_tensor_list, group=None, async_op=False):
    rs = _rank()
    g = _member(rs, group, "all_to_all")
    outs = [_check_tensor(rs, x, "all_to_all") for x in output_tensor_list]
    ins = [_check_tensor(rs, x, "all_to_all") for x in input_tensor_list]
    n = g.size()
    return _launch_collective(rs, g, "all_to_all", _desc("all_to_all", ins), ("all_to_all", len(ins)), ins, outs,
                              lambda vals: [[vals[k][j] for k in range(n)] for j in range(n)], async_op)


@_skip_if_not_member
def gather(tensor, gather_list=None, dst=None, group=None, async_op=False, group_dst=None):
    rs = _rank()
    g = _member(rs, group, "gather")
    t = _check_tensor(rs, tensor, "gather")
    root = _root(g, dst, group_dst)
    i = g.index[root]
    n = g.size()
    outs = [_check_tensor(rs, x, "gather") for x in (gather_list or [])] if rs.rank == root else []
    if rs.rank == root and len(outs) != n:
        raise ValueError(f"gather: the destination needs a gather_list of {n} tensors")
    return _launch_collective(
        rs, g, "gather", _desc("gather", [t], f"dst={root}"), ("gather", _sig_t(t), root), [t], outs,
        lambda vals: [[v[0] for v in vals] if j == i else [] for j in range(n)], async_op)


@_skip_if_not_member
def scatter(tensor, scatter_list=None, src=None, group=None, async_op=False, group_src=None):
    rs = _rank()
    g = _member(rs, group, "scatter")
    t = _check_tensor(rs, tensor, "scatter")
    root = _root(g, src, group_src)
    i = g.index[root]
    n = g.size()
    ins = [_check_tensor(rs, x, "scatter") for x in (scatter_list or [])] if rs.rank == root else []
    if rs.rank == root and len(ins) != n:
        raise ValueError(f"scatter: the source needs a scatter_list of {n} tensors")
    return _launch_collective(
        rs, g, "scatter", _desc("scatter", [t], f"src={root}"), ("scatter", _sig_t(t), root), ins, [t],
        lambda vals: [[vals[i][j]] for j in range(n)], async_op)


@_skip_if_not_member
def barrier(group=None, async_op=False, device_ids=None):
    rs = _rank()
    g = _member(rs, group, "barrier")
    from .dispatch import allocate
    dev = rs.device()
    buf = allocate(dev, rs.current_stream(), (1,), (1,), torch.float32)
    buf._inner.fill_(0)
    w = _launch_collective(rs, g, "all_reduce", "barrier()", ("barrier",), [buf], [buf],
                           lambda vals: [[engine.reduce_values([v[0] for v in vals], "SUM")]] * len(vals), True)
    w._host_blocking = True
    if async_op:
        return w
    w.wait()
    return None


monitored_barrier = barrier


# --- point to point ---------------------------------------------------------------------
def _p2p(rs, tensor, peer, is_send, group, async_op, batched=False):
    g = _member(rs, group, "send" if is_send else "recv")
    t = _check_tensor(rs, tensor, "send" if is_send else "recv")
    if peer is None or peer not in g.index:
        raise ValueError(f"{'send' if is_send else 'recv'}: peer {peer} is not in group {g.name}")
    if peer == rs.rank:
        raise ValueError(f"rank {rs.rank} cannot send to or receive from itself")
    src, dst = (rs.rank, peer) if is_send else (peer, rs.rank)
    pair = rs.collectives.p2p_pair(g, src, dst)
    desc = f"{'send' if is_send else 'recv'}({t.dtype}{list(t.shape)}, {'dst' if is_send else 'src'}={peer})"
    sig = ("p2p", _sig_t(t))
    si = pair.index[src]
    return _launch_collective(
        rs, pair, "p2p", desc, sig, [t] if is_send else [], [] if is_send else [t],
        lambda vals: [[None] if j == si else [vals[si][0]] for j in range(2)], async_op,
        nbytes=t.numel() * t.element_size(),
        # a batch is one NCCL group: its sends and receives with one peer run together, not queued
        stream_key=f"p2p:{min(src, dst)}-{max(src, dst)}" + ((":send" if is_send else ":recv") if batched else ""))


def send(tensor, dst=None, group=None, tag=0, group_dst=None):
    rs = _rank()
    _p2p(rs, tensor, dst, True, group, False)


def recv(tensor, src=None, group=None, tag=0, group_src=None):
    rs = _rank()
    _p2p(rs, tensor, src, False, group, False)
    return src


def isend(tensor, dst=None, group=None, tag=0, group_dst=None):
    return _p2p(_rank(), tensor, dst, True, group, True)


def irecv(tensor, src=None, group=None, tag=0, group_src=None):
    return _p2p(_rank(), tensor, src, False, group, True)


def batch_isend_irecv(p2p_op_list):
    works = []
    for p in p2p_op_list:
        fn = getattr(p, "op", None)
        peer = getattr(p, "peer", None)
        is_send = fn in (isend, _orig.get("isend")) or getattr(fn, "__name__", "") == "isend"
        works.append(_p2p(_rank(), p.tensor, peer, is_send, getattr(p, "group", None), True, batched=True))
    return works


class P2POp:
    def __init__(self, op, tensor, peer=None, group=None, tag=0, group_peer=None):
        self.op = op
        self.tensor = tensor
        self.peer = peer
        self.group = group
        self.tag = tag


# --- object collectives -------------------------------------------------------------------
def _object_exchange(what, group, payload):
    rs = _rank()
    g = _member(rs, group, what)
    return g, engine.host_exchange(rs, g, what, payload)


def all_gather_object(object_list, obj, group=None):
    g, inst = _object_exchange("all_gather_object", group, pickle.dumps(obj))
    for i, r in enumerate(g.ranks):
        object_list[i] = pickle.loads(inst.payloads[r])


def broadcast_object_list(object_list, src=None, group=None, device=None, group_src=None):
    rs = _rank()
    g0 = _resolve(group)
    root = _root(g0, src, group_src)
    g, inst = _object_exchange("broadcast_object_list", group, pickle.dumps(list(object_list)))
    vals = pickle.loads(inst.payloads[root])
    for i, v in enumerate(vals):
        object_list[i] = v


def gather_object(obj, object_gather_list=None, dst=None, group=None, group_dst=None):
    rs = _rank()
    g, inst = _object_exchange("gather_object", group, pickle.dumps(obj))
    root = _root(g, dst, group_dst)
    if rs.rank == root and object_gather_list is not None:
        for i, r in enumerate(g.ranks):
            object_gather_list[i] = pickle.loads(inst.payloads[r])


def scatter_object_list(scatter_object_output_list, scatter_object_input_list=None, src=None, group=None,
                        group_src=None):
    rs = _rank()
    g0 = _resolve(group)
    root = _root(g0, src, group_src)
    g, inst = _object_exchange("scatter_object_list", group,
                               pickle.dumps(list(scatter_object_input_list or [])))
    vals = pickle.loads(inst.payloads[root])
    scatter_object_output_list[0] = vals[g.index[rs.rank]]


# --- groups and world ------------------------------------------------------------------------
def init_process_group(backend=None, init_method=None, timeout=None, world_size=-1, rank=-1, store=None,
                       group_name="", pg_options=None, device_id=None, **kwargs):
    rs = _rank()
    w = rs.world
    if world_size not in (-1, None) and world_size != w.world_size:
        raise ValueError(f"init_process_group(world_size={world_size}) but the simulated world has "
                         f"{w.world_size} ranks")
    if rank not in (-1, None) and rank != rs.rank:
        raise ValueError(f"init_process_group(rank={rank}) called on simulated rank {rs.rank}")
    if device_id is not None:
        from .cuda import set_device
        set_device(device_id)
        rs.collectives.eager_init = True
    rs.collectives.world_group.backend = str(backend).lower() if backend else DEFAULT_BACKEND


def is_initialized():
    return True


def is_available():
    return True


def is_nccl_available():
    return True


def get_backend(group=None):
    rs = _rank()
    return _backend_of(_resolve(group))


def _backend_of(g):
    return g.backend or _rank().collectives.world_group.backend or DEFAULT_BACKEND


def get_rank(group=None):
    rs = _rank()
    if group is c10d.GroupMember.NON_GROUP_MEMBER:
        return -1
    g = _resolve(group)
    return g.index.get(rs.rank, -1)


def get_world_size(group=None):
    rs = _rank()
    if group is c10d.GroupMember.NON_GROUP_MEMBER:
        return -1
    g = _resolve(group)
    return g.size() if rs.rank in g.index else -1


def new_group(ranks=None, timeout=None, backend=None, pg_options=None, use_local_synchronization=False,
              group_desc=None, device_id=None):
    rs = _rank()
    g = rs.collectives.new_group(ranks, group_desc)
    if backend is not None and g.backend is None:
        g.backend = str(backend).lower()
    # torch.distributed hands non-members GroupMember.NON_GROUP_MEMBER (collectives on it are no-ops)
    return g if rs.rank in g.index else c10d.GroupMember.NON_GROUP_MEMBER


def new_subgroups(group_size=None, group=None, timeout=None, backend=None, pg_options=None, group_desc=None):
    rs = _rank()
    n = rs.world.world_size
    group_size = group_size or n
    if n % group_size:
        raise ValueError(f"new_subgroups: world size {n} is not divisible by group_size {group_size}")
    subgroups, cur = [], None
    for start in range(0, n, group_size):
        ranks = list(range(start, start + group_size))
        g = rs.collectives.new_group(ranks, group_desc)
        subgroups.append(g)
        if rs.rank in ranks:
            cur = g
    return cur, subgroups


def new_subgroups_by_enumeration(ranks_per_subgroup_list, timeout=None, backend=None, pg_options=None,
                                 group_desc=None):
    rs = _rank()
    subgroups, cur = [], None
    for ranks in ranks_per_subgroup_list:
        g = rs.collectives.new_group(ranks, group_desc)
        subgroups.append(g)
        if rs.rank in g.index:
            cur = g
    return cur, subgroups


def get_global_rank(group, group_rank):
    g = _resolve(group)
    return g.ranks[group_rank]


def get_group_rank(group, global_rank):
    g = _resolve(group)
    if global_rank not in g.index:
        raise ValueError(f"rank {global_rank} is not part of group {g.name}")
    return g.index[global_rank]


def get_process_group_ranks(group):
    return list(_resolve(group).ranks)


def destroy_process_group(group=None):
    return None


def _get_default_group():
    return _rank().collectives.world_group


class _GroupNS:
    @property
    def WORLD(self):
        rs = current_rank()
        return rs.collectives.world_group if rs is not None else None


_orig = {}

_FUNCS = dict(
    init_process_group=init_process_group, is_initialized=is_initialized, is_available=is_available,
    is_nccl_available=is_nccl_available, get_backend=get_backend, get_rank=get_rank,
    get_world_size=get_world_size, new_group=new_group, new_subgroups=new_subgroups,
    new_subgroups_by_enumeration=new_subgroups_by_enumeration, get_global_rank=get_global_rank,
    get_group_rank=get_group_rank, get_process_group_ranks=get_process_group_ranks,
    destroy_process_group=destroy_process_group, all_reduce=all_reduce, broadcast=broadcast, reduce=reduce,
    all_gather=all_gather, all_gather_into_tensor=all_gather_into_tensor, _all_gather_base=all_gather_into_tensor,
    reduce_scatter=reduce_scatter, reduce_scatter_tensor=reduce_scatter_tensor,
    _reduce_scatter_base=reduce_scatter_tensor, all_to_all_single=all_to_all_single, all_to_all=all_to_all,
    gather=gather, scatter=scatter, barrier=barrier, monitored_barrier=monitored_barrier, send=send, recv=recv,
    isend=isend, irecv=irecv, batch_isend_irecv=batch_isend_irecv, P2POp=P2POp,
    all_gather_object=all_gather_object, broadcast_object_list=broadcast_object_list, gather_object=gather_object,
    scatter_object_list=scatter_object_list, _get_default_group=_get_default_group,
)


def _real_rendezvous(*args, **kwargs):
    """The real c10d rendezvous, reached inside a run: it would wait on a TCP store forever."""
    raise UnsupportedOperation(
        "the real torch.distributed rendezvous was reached inside a simulated rank (a TCP store would wait "
        "for peers that never come). simdist models torch.distributed's public API (dist.init_process_group, "
        "new_group, the collectives, P2P, object collectives); code that holds references to c10d internals "
        "taken before the run (DeviceMesh / init_device_mesh, DTensor, functional collectives) is not modelled")


def distributed_patches():
    out = []
    import torch.distributed.rendezvous as _rdzv
    for mod, name in ((_rdzv, "rendezvous"), (c10d, "rendezvous"), (c10d, "_create_c10d_store"),
                      (_rdzv, "_create_c10d_store")):
        if hasattr(mod, name):
            out.append((mod, name, _real_rendezvous))
    for mod in (_dist, c10d):
        for name, fn in _FUNCS.items():
            if hasattr(mod, name):
                _orig.setdefault(name, getattr(mod, name))
                out.append((mod, name, fn))
    out.append((_dist, "group", _GroupNS()))
    out.append((c10d, "group", _GroupNS()))
    return out
