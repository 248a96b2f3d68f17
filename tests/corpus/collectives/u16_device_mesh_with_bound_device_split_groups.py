"""A 2-D DeviceMesh (dp=2, tp=2) built after `init_process_group(device_id=...)`: with the default group bound to a
device, DeviceMesh creates each dimension's groups with one `split_group` call (ncclCommSplit); the TP and DP
groups then carry a sequence-parallel all-gather and a gradient all-reduce, and `mesh["tp"]` slicing / get_group
give the same groups.

EXPECTED: clean
WORLD_SIZE: 4
MODELLED ON: torchtitan's parallel-dims setup (`init_process_group(..., device_id=...)` then
`init_device_mesh("cuda", (dp, tp), mesh_dim_names=("dp", "tp"))`), torch/distributed/device_mesh.py
`_init_one_process_group` ("If bound_device_id exists ... we can use `split_group` to create subgroups through
`ncclCommSplit`").
REASON: device_mesh.py `_init_one_process_group` calls `split_group(parent_pg=default_group, split_ranks=
pg_ranks_by_dim.tolist(), ...)` when the default group has a bound device; distributed_c10d.split_group returns each
rank its own group. Values: plain gathers and sums over the mesh rows/columns.
"""
import os

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh


def main():
    lr = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(lr)
    dist.init_process_group("nccl", device_id=torch.device("cuda", lr))
    rank = dist.get_rank()
    mesh = init_device_mesh("cuda", (2, 2), mesh_dim_names=("dp", "tp"))
    tp, dp = mesh["tp"], mesh["dp"]
    tp_ranks = [2 * (rank // 2), 2 * (rank // 2) + 1]
    dp_ranks = [rank % 2, rank % 2 + 2]
    assert dist.get_process_group_ranks(tp.get_group()) == tp_ranks
    assert dist.get_process_group_ranks(mesh.get_group("dp")) == dp_ranks
    assert tp.get_local_rank() == rank % 2 and dp.get_local_rank() == rank // 2
    # sequence-parallel all-gather of activations along TP
    act = torch.full((3, 8), float(rank), device="cuda")
    full = torch.empty(6, 8, device="cuda")
    dist.all_gather_into_tensor(full, act, group=tp.get_group())
    assert full[:, 0].tolist() == [float(tp_ranks[0])] * 3 + [float(tp_ranks[1])] * 3
    # gradient all-reduce (AVG) along DP
    grad = torch.arange(16, dtype=torch.float32, device="cuda") * (rank + 1)
    dist.all_reduce(grad, op=dist.ReduceOp.AVG, group=dp.get_group())
    want = torch.arange(16, dtype=torch.float32) * sum(r + 1 for r in dp_ranks) / 2
    assert torch.allclose(grad.cpu(), want), grad[:4]
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
