"""DTensor placements: distribute_tensor with Shard(0) / Shard(1) / Replicate, redistribute Shard(0) -> Replicate
(all-gather), Shard(0) -> Shard(1) (all-to-all), Partial -> Replicate (all-reduce), Partial -> Shard(0)
(reduce-scatter), an uneven Shard(0) of 5 rows; full_tensor(); a DTensor matmul.

EXPECTED: clean
WORLD_SIZE: 2
MODELLED ON: torch/distributed/tensor/_api.py `distribute_tensor`, `DTensor.redistribute`, `DTensor.from_local`,
`full_tensor`; torch/distributed/tensor/_redistribute.py (the collective per placement change).
REASON: DTensor's collectives are functional collectives whose results are waited before use (wait_tensor /
AsyncCollectiveTensor), so every result is ordered; values follow from the placements' definitions (torch.chunk
sharding: uneven last shard).
"""
import os
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    mesh = init_device_mesh("cuda", (world,))
    full = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    d0 = distribute_tensor(full.cuda(), mesh, [Shard(0)])
    assert torch.equal(d0.to_local().cpu(), full.chunk(world, 0)[rank])
    rep = d0.redistribute(mesh, [Replicate()])
    assert torch.equal(rep.to_local().cpu(), full)
    d1 = d0.redistribute(mesh, [Shard(1)])
    assert torch.equal(d1.to_local().cpu(), full.chunk(world, 1)[rank]), d1.to_local().cpu()
    assert torch.equal(d1.full_tensor().cpu(), full)

    local = torch.full((4, 6), float(rank + 1), device="cuda")
    part = DTensor.from_local(local, mesh, [Partial()])
    total = float(sum(range(1, world + 1)))
    assert torch.all(part.redistribute(mesh, [Replicate()]).to_local().cpu() == total)
    rs = part.redistribute(mesh, [Shard(0)])
    assert rs.to_local().shape == (4 // world, 6) and torch.all(rs.to_local().cpu() == total)

    odd = torch.arange(5 * 3, dtype=torch.float32).reshape(5, 3)
    du = distribute_tensor(odd.cuda(), mesh, [Shard(0)])
    assert torch.equal(du.to_local().cpu(), odd.chunk(world, 0)[rank])
    assert torch.equal(du.full_tensor().cpu(), odd)

    w = torch.randn(6, 3, generator=torch.Generator().manual_seed(0))
    dw = distribute_tensor(w.cuda(), mesh, [Replicate()])
    y = d0 @ dw                                     # Shard(0) x Replicate -> Shard(0)
    assert torch.allclose(y.full_tensor().cpu(), full @ w, atol=1e-4)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
