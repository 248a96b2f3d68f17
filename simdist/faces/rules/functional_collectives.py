"""Op rules for torch's functional collectives (`torch.ops._c10d_functional`, what DTensor, DeviceMesh and
torch.distributed._functional_collectives issue) on simulated tensors.

As their C++ kernels do (torch/csrc/distributed/c10d/Functional.cpp): the out-of-place ops allocate their
output (all_reduce clones its input first), run the collective on the group registered under `group_name` as an
async op, and register its Work against the output; `wait_tensor(t)` waits for the Work registered for t's
memory (making the current stream wait), and is a no-op when there is none.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives  # noqa: F401  (defines the _c10d_functional ops' Python side)

from ...engine.errors import UnsupportedOperation
from ..c10d import SimProcessGroup, state
from ..dispatch import _sim_of, allocate_like_contiguous
from ..op_rules import register, register_namespace

fc = torch.ops._c10d_functional
fca = torch.ops._c10d_functional_autograd
aten = torch.ops.aten

def _pg(group_name):
    name = group_name if isinstance(group_name, str) else getattr(group_name, "group_name", group_name)
    pg = dist.distributed_c10d._resolve_process_group(name)
    if not isinstance(pg, SimProcessGroup):
        raise UnsupportedOperation(f"functional collective on group {name!r}, which is not a simulated process "
                                   "group")
    return pg


def _register_work(me, t, work):
    state(me).works.setdefault(id(t._alloc), []).append(work)


class _Op:
    """The reduce op named by a string, as c10d's functional ops take it."""

    def __init__(self, name):
        self.name = str(name).upper()


def _out(me, shape, like):
    return allocate_like_contiguous(like._dev, me.current_stream(like._dev.index), tuple(shape), like.dtype)


def _clone(t):
    return aten.clone.default(t, memory_format=torch.contiguous_format)


@register(fc.all_reduce.default)
def _all_reduce(me, func, args, kwargs):
    t, op, group = _args(args, kwargs, ("input", "reduce_op", "group_name"))
    out = _clone(_sim_of(t))
    _register_work(me, out, _pg(group)._allreduce([out], _Op(op), True))
    return out


@register(fc.all_reduce_.default)
def _all_reduce_(me, func, args, kwargs):
    t, op, group = _args(args, kwargs, ("input", "reduce_op", "group_name"))
    _register_work(me, _sim_of(t), _pg(group)._allreduce([_sim_of(t)], _Op(op), True))
    return t


@register(fc.all_reduce_coalesced.default)
def _all_reduce_coalesced(me, func, args, kwargs):
    ts, op, group = _args(args, kwargs, ("inputs", "reduce_op", "group_name"))
    outs = [_clone(_sim_of(t)) for t in ts]
    work = _pg(group)._allreduce(outs, _Op(op), True)
    for o in outs:
        _register_work(me, o, work)
    return outs


@register(fc.all_reduce_coalesced_.default)
def _all_reduce_coalesced_(me, func, args, kwargs):
    ts, op, group = _args(args, kwargs, ("inputs", "reduce_op", "group_name"))
    sims = [_sim_of(t) for t in ts]
    work = _pg(group)._allreduce(sims, _Op(op), True)
    for o in sims:
        _register_work(me, o, work)
    return ts


def _gathered(me, t, group_size):
    t = _sim_of(t)
    shape = list(t.shape) or [1]
    shape[0] *= int(group_size)
    return _out(me, shape, t)


@register(fc.all_gather_into_tensor.default, fca.all_gather_into_tensor.default)
def _all_gather(me, func, args, kwargs):
    t, n, group = _args(args, kwargs, ("input", "group_size", "group_name"))
    src = _contiguous(_sim_of(t))
    out = _gathered(me, src, n)
    _register_work(me, out, _pg(group)._allgather_into(out, src, True, "all_gather_into_tensor"))
    return out


@register(fc.all_gather_into_tensor_out.default)
def _all_gather_out(me, func, args, kwargs):
    t, n, group = _args(args, kwargs, ("input", "group_size", "group_name"))
    out = kwargs["out"]
    _register_work(me, _sim_of(out), _pg(group)._allgather_into(_sim_of(out), _contiguous(_sim_of(t)), True))
    return out


@register(fc.all_gather_into_tensor_coalesced.default)
def _all_gather_coalesced(me, func, args, kwargs):
    ts, n, group = _args(args, kwargs, ("inputs", "group_size", "group_name"))
    pg = _pg(group)
    outs = []
    for t in ts:
        src = _contiguous(_sim_of(t))
        out = _gathered(me, src, n)
        _register_work(me, out, pg._allgather_into(out, src, True, "all_gather_into_tensor_coalesced"))
        outs.append(out)
    return outs


def _scattered(me, t, group_size):
    shape = list(t.shape)
    n = int(group_size)
    if not shape or shape[0] % n:
        raise ValueError(f"reduce_scatter_tensor: dim 0 of the input ({shape}) must be divisible by the group size "
                         f"{n}")
    shape[0] //= n
    return _out(me, shape, t)


@register(fc.reduce_scatter_tensor.default, fca.reduce_scatter_tensor.default)
def _reduce_scatter(me, func, args, kwargs):
    t, op, n, group = _args(args, kwargs, ("input", "reduce_op", "group_size", "group_name"))
    src = _contiguous(_sim_of(t))
    out = _scattered(me, src, n)
    _register_work(me, out, _pg(group)._reduce_scatter_tensor(out, src, _Op(op), True))
    return out


@register(fc.reduce_scatter_tensor_out.default)
def _reduce_scatter_out(me, func, args, kwargs):
    t, op, n, group = _args(args, kwargs, ("input", "reduce_op", "group_size", "group_name"))
    out = kwargs["out"]
    _register_work(me, _sim_of(out),
                   _pg(group)._reduce_scatter_tensor(_sim_of(out), _contiguous(_sim_of(t)), _Op(op), True))
    return out


@register(fc.reduce_scatter_tensor_coalesced.default)
def _reduce_scatter_coalesced(me, func, args, kwargs):
    ts, op, n, group = _args(args, kwargs, ("inputs", "reduce_op", "group_size", "group_name"))
    pg = _pg(group)
    outs = []
    for t in ts:
        src = _contiguous(_sim_of(t))
        out = _scattered(me, src, n)
        _register_work(me, out, pg._reduce_scatter_tensor(out, src, _Op(op), True))
        outs.append(out)
    return outs


@register(fc.all_to_all_single.default, fca.all_to_all_single.default)
def _all_to_all(me, func, args, kwargs):
    t, out_splits, in_splits, group = _args(args, kwargs, ("input", "output_split_sizes", "input_split_sizes",
                                                         "group_name"))
    src = _contiguous(_sim_of(t))
    shape = list(src.shape)
    shape[0] = int(sum(int(s) for s in out_splits))
    out = _out(me, shape, src)
    _register_work(me, out, _pg(group)._alltoall_single(out, src, [int(s) for s in out_splits],
                                                        [int(s) for s in in_splits], True))
    return out


@register(torch.ops._dtensor.shard_dim_alltoall.default)
def _shard_dim_alltoall(me, func, args, kwargs):
    """DTensor's Shard(i) -> Shard(j) (torch/csrc/distributed/c10d/Functional.cpp shard_dim_alltoall): the input
    viewed with the shard dim split in group-size pieces, the pieces moved to the front and made contiguous, one
    equal-split alltoall_base, `work->wait()` (synchronous: the current stream waits), the received pieces moved to
    the gather dim and viewed as the output shape."""
    t, gather_dim, shard_dim, group = _args(args, kwargs, ("input", "gather_dim", "shard_dim", "group_name"))
    pg = _pg(group)
    n = pg.size()
    x = _sim_of(t)
    nd = x.dim()
    gather_dim, shard_dim = int(gather_dim) % nd, int(shard_dim) % nd
    in_sizes = list(x.shape)
    out_sizes = list(x.shape)
    in_sizes[shard_dim] //= n
    in_sizes.insert(shard_dim, n)
    pieces = aten.clone.default(aten.movedim.int(aten.view.default(x, in_sizes), shard_dim, 0),
                                memory_format=torch.contiguous_format)
    comm = aten.view_as_real.default(pieces) if x.is_complex() else pieces
    recv = _out(me, comm.shape, comm)
    pg._alltoall_single(recv, comm, [], [], False).wait()
    if x.is_complex():
        recv = aten.view_as_complex.default(recv)
    out = aten.clone.default(aten.movedim.int(recv, 0, gather_dim), memory_format=torch.contiguous_format)
    out_sizes[shard_dim] //= n
    out_sizes[gather_dim] *= n
    return aten.view.default(out, out_sizes)


@register(fc.broadcast.default)
def _broadcast(me, func, args, kwargs):
    t, src, group = _args(args, kwargs, ("input", "src", "group_name"))
    out = _clone(_sim_of(t))
    _register_work(me, out, _broadcast_on(_pg(group), out, src))
    return out


@register(fc.broadcast_.default)
def _broadcast_(me, func, args, kwargs):
    t, src, group = _args(args, kwargs, ("input", "src", "group_name"))
    _register_work(me, _sim_of(t), _broadcast_on(_pg(group), _sim_of(t), src))
    return t


def _broadcast_on(pg, t, src):
    opts = dist.BroadcastOptions()
    opts.rootRank = dist.get_group_rank(pg, int(src))
    opts.asyncOp = True
    return pg.broadcast([t], opts)


@register(fc.wait_tensor.default)
def _wait_tensor(me, func, args, kwargs):
    t = args[0] if args else kwargs["tensor"]
    works = state(me).works.pop(id(_sim_of(t)._alloc), ())
    for w in works:
        w.wait()
    return t


@register_namespace("_c10d_functional")
@register_namespace("_c10d_functional_autograd")
def _not_modelled(me, func, args, kwargs):
    if func.__name__.startswith("_wrap_tensor_autograd"):  # a Python custom op (AsyncCollectiveTensor(input))
        return func.redispatch(torch._C.DispatchKeySet(torch._C.DispatchKey.CompositeExplicitAutograd), *args,
                               **kwargs)
    raise UnsupportedOperation(f"{func} on simulated tensors is not modelled by simdist")


def _contiguous(t):
    return t if t.is_contiguous() else _clone(t)


def _args(args, kwargs, names):
    out = list(args[:len(names)])
    for n in names[len(out):]:
        out.append(kwargs[n])
    return out
