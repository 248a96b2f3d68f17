"""DTensor on a 2-D mesh (2 x 2, 4 ranks): a 7 x 5 tensor (uneven on both mesh dims) distributed as
[Shard(0), Shard(1)], then redistributed through a chain [Replicate, Shard(1)] -> [Replicate, Replicate], then a
[Partial, Replicate] DTensor made from the local halves (`from_local`: redistributing to Partial is refused, "for
internal use only") -> [Shard(1), Shard(0)] (a reduce-scatter over "dp") -> [Shard(0), Replicate], checking every local shard's shape and
values and the full tensor; autograd through the chain (the gradient of a weighted sum comes back sharded as the
input); and `distribute_module` with a partition_fn (column-wise Linear weight), an input_fn (replicate the input
over the mesh) and an output_fn (gather the output), against the plain Linear.

EXPECTED: clean
WORLD_SIZE: 4
MODELLED ON: torch/distributed/tensor/_api.py (`distribute_tensor`, `DTensor.redistribute`, `full_tensor`,
`distribute_module(module, mesh, partition_fn, input_fn, output_fn)`), torch/distributed/tensor/_redistribute.py
(one transform per mesh dim: all-gather, all-to-all for Shard(i) -> Shard(j), reduce-scatter for Partial ->
Shard, the local split for Replicate -> Partial / Shard), torch/distributed/tensor/placement_types.py (Shard's
torch.chunk split: uneven shards, the last one smaller; padding for the collectives).
REASON: every collective DTensor issues is a functional collective waited before its result is used (wait_tensor
through AsyncCollectiveTensor), so the values are the placements' definitions: torch.chunk shards of the full
tensor, Partial sums over the mesh dim. The backward of redistribute redistributes the gradient back to the
input's placements (_redistribute.py Redistribute.backward).
"""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import (DTensor, Partial, Replicate, Shard, distribute_module, distribute_tensor)


def expected_local(full, placements, coord):
    t = full
    for dim_idx, p in enumerate(placements):
        if isinstance(p, Shard):
            t = t.chunk(2, p.dim)[coord[dim_idx]] if coord[dim_idx] < len(t.chunk(2, p.dim)) else t[:0]
    return t


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    mesh = init_device_mesh("cuda", (2, 2), mesh_dim_names=("dp", "tp"))
    coord = mesh.get_coordinate()
    full = torch.arange(35, dtype=torch.float32).reshape(7, 5)
    d = distribute_tensor(full.cuda(), mesh, [Shard(0), Shard(1)])
    assert torch.equal(d.to_local().cpu(), expected_local(full, [Shard(0), Shard(1)], coord))
    cur = d
    for placements in ([Replicate(), Shard(1)], [Replicate(), Replicate()], "partial", [Shard(1), Shard(0)],
                       [Shard(0), Replicate()]):
        if placements == "partial":   # each "dp" coordinate holds a share; their sum is the tensor
            share = cur.to_local() * (0.25 if coord[0] == 0 else 0.75)
            cur = DTensor.from_local(share, mesh, [Partial(), Replicate()])
            assert torch.equal(cur.full_tensor().cpu(), full)
            continue
        cur = cur.redistribute(mesh, placements)
        assert tuple(cur.placements) == tuple(placements)
        exp = expected_local(full, placements, coord)
        assert torch.equal(cur.to_local().cpu(), exp), (placements, cur.to_local().cpu(), exp)
        assert torch.equal(cur.full_tensor().cpu(), full), placements

    # autograd through a chain
    w = torch.linspace(-1, 1, 35).reshape(7, 5)
    x = distribute_tensor(full.cuda(), mesh, [Shard(0), Shard(1)]).requires_grad_(True)
    y = x.redistribute(mesh, [Replicate(), Shard(1)]).redistribute(mesh, [Shard(1), Shard(0)])
    loss = (y.full_tensor() * w.cuda()).sum()
    loss.backward()
    assert tuple(x.grad.placements) == (Shard(0), Shard(1))
    assert torch.equal(x.grad.full_tensor().cpu(), w)
    assert torch.equal(x.grad.to_local().cpu(), expected_local(w, [Shard(0), Shard(1)], coord))

    # distribute_module: a column-wise Linear over the "tp" dim, replicated over "dp"
    torch.manual_seed(0)
    ref = nn.Linear(5, 6)
    lin = nn.Linear(5, 6)
    lin.load_state_dict(ref.state_dict())

    def partition_fn(name, module, mesh):
        for pname, p in list(module.named_parameters(recurse=False)):
            module.register_parameter(pname, nn.Parameter(distribute_tensor(p.data, mesh, [Replicate(), Shard(0)])))

    def input_fn(module, inputs, mesh):
        return tuple(DTensor.from_local(t, mesh, [Replicate(), Replicate()]) for t in inputs)

    def output_fn(module, out, mesh):
        return out.redistribute(mesh, [Replicate(), Replicate()]).to_local()

    dmod = distribute_module(lin.cuda(), mesh, partition_fn, input_fn, output_fn)
    assert tuple(dmod.weight.placements) == (Replicate(), Shard(0))
    inp = torch.randn(3, 5, generator=torch.Generator().manual_seed(1))
    out = dmod(inp.cuda())
    exp = ref(inp)
    assert torch.allclose(out.cpu(), exp, atol=1e-6), (out.cpu() - exp).abs().max()
    out.sum().backward()
    exp.sum().backward()
    assert torch.allclose(dmod.weight.grad.full_tensor().cpu(), ref.weight.grad, atol=1e-6)
    assert torch.allclose(dmod.bias.grad.full_tensor().cpu(), ref.bias.grad, atol=1e-6)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
