"""A 2-D DeviceMesh (dp=2, tp=2) from init_device_mesh with named dims: all_reduce on mesh["tp"], all_gather on
mesh["dp"], a flattened ("dp", "tp") dim, get_local_rank / get_coordinate, and a mesh built from an explicit rank
layout [[0, 2], [1, 3]].

EXPECTED: clean
WORLD_SIZE: 4
MODELLED ON: torchtitan's ParallelDims.build_mesh (init_device_mesh("cuda", (dp, tp), mesh_dim_names=("dp", "tp")),
mesh["dp", "tp"]._flatten()), torch/distributed/device_mesh.py.
REASON: init_device_mesh lays ranks out row-major (tp groups [0, 1], [2, 3]; dp groups [0, 2], [1, 3]); a
DeviceMesh from an explicit tensor uses that layout; collectives are synchronous on the current stream.
"""
import os
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    mesh = init_device_mesh("cuda", (2, 2), mesh_dim_names=("dp", "tp"))
    dp, tp = rank // 2, rank % 2
    assert mesh["dp"].get_local_rank() == dp and mesh["tp"].get_local_rank() == tp
    assert list(mesh.get_coordinate()) == [dp, tp]
    t = torch.tensor([float(rank)], device="cuda")
    dist.all_reduce(t, group=mesh["tp"].get_group())
    assert t.item() == float(2 * dp * 2 + 1), t.item()
    out = torch.empty(2, device="cuda")
    dist.all_gather_into_tensor(out, torch.tensor([float(rank)], device="cuda"), group=mesh["dp"].get_group())
    assert out.cpu().tolist() == [float(tp), float(tp + 2)]
    flat = mesh["dp", "tp"]._flatten("dp_tp")
    f = torch.tensor([1.0], device="cuda")
    dist.all_reduce(f, group=flat.get_group())
    assert f.item() == 4.0
    assert dist.get_process_group_ranks(flat.get_group()) == [0, 1, 2, 3]

    custom = DeviceMesh("cuda", torch.tensor([[0, 2], [1, 3]]), mesh_dim_names=("a", "b"))
    b_ranks = dist.get_process_group_ranks(custom["b"].get_group())
    assert b_ranks == ([0, 2] if rank in (0, 2) else [1, 3]), b_ranks
    v = torch.tensor([float(rank + 1)], device="cuda")
    dist.all_reduce(v, op=dist.ReduceOp.MAX, group=custom["a"].get_group())
    a_ranks = dist.get_process_group_ranks(custom["a"].get_group())
    assert a_ranks == ([0, 1] if rank in (0, 1) else [2, 3]), a_ranks
    assert v.item() == float(max(a_ranks) + 1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
