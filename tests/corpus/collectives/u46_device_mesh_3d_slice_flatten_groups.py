"""A 3-D DeviceMesh (pp=2, dp=2, tp=2) sliced to its 2-D ("dp", "tp") sub-mesh and flattened into one "dp_tp"
dimension (the FSDP/HSDP shard group); gradient sums over the flattened group and activations over the pp group,
coordinates from the sub-mesh.

EXPECTED: clean
WORLD_SIZE: 8
MODELLED ON: torchtitan's parallel_dims mesh (`world_mesh[("dp_shard", "cp")]._flatten(mesh_dim_name="dp_shard_cp")`,
torchtitan/distributed/parallel_dims.py) and torch/distributed/device_mesh.py `__getitem__` / `_flatten` /
`get_group` / `get_coordinate`.
REASON: a mesh of shape (2, 2, 2) over ranks 0..7 in row-major order: the ("dp", "tp") sub-mesh of rank r holds the
4 ranks with r's pp index, flattening keeps them as one group; the pp group pairs r with r ^ 4. Values: plain sums.
"""
import os

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh


def main():
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    mesh = init_device_mesh("cuda", (2, 2, 2), mesh_dim_names=("pp", "dp", "tp"))
    sub = mesh["dp", "tp"]
    flat = sub._flatten("dp_tp")
    block = list(range(4 * (rank // 4), 4 * (rank // 4) + 4))
    assert dist.get_process_group_ranks(flat.get_group()) == block
    assert list(sub.get_coordinate()) == [(rank % 4) // 2, rank % 2]
    g = torch.full((64,), float(rank), device="cuda")
    dist.all_reduce(g, group=flat.get_group())
    assert torch.equal(g.cpu(), torch.full((64,), float(sum(block))))
    a = torch.full((8,), float(rank), device="cuda")
    dist.all_reduce(a, group=mesh["pp"].get_group())
    assert torch.equal(a.cpu(), torch.full((8,), float(rank + (rank ^ 4))))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
