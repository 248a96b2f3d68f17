"""DTensor redistribute(async_op=True): Shard(0) -> Replicate and Partial -> Replicate return DTensors whose local
tensors are AsyncCollectiveTensors; compute on them overlaps nothing it must not: the first op on the local tensor
waits the collective. Values checked, also after a matmul on the DTensor.

EXPECTED: clean
WORLD_SIZE: 2
MODELLED ON: torch/distributed/tensor/_api.py `DTensor.redistribute(..., async_op=True)` (torchtitan / FSDP2-TP
overlap), torch/distributed/_functional_collectives.py `AsyncCollectiveTensor` (wait_tensor before any op reads
the result).
REASON: an AsyncCollectiveTensor's __torch_dispatch__ waits the collective (wait_tensor: the current stream waits
for it) before the op that reads it (torch/distributed/_functional_collectives.py).
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
    full = torch.arange(32, dtype=torch.float32).reshape(8, 4)
    d = distribute_tensor(full.cuda(), mesh, [Shard(0)])
    rep = d.redistribute(mesh, [Replicate()], async_op=True)
    y = rep.to_local() * 2 + 1
    assert torch.equal(y.cpu(), full * 2 + 1)
    part = DTensor.from_local(torch.full((4, 4), float(rank + 1), device="cuda"), mesh, [Partial()])
    r2 = part.redistribute(mesh, [Replicate()], async_op=True)
    w = torch.eye(4, device="cuda") * 3
    z = r2.to_local() @ w
    assert torch.all(z.cpu() == 3.0 * sum(range(1, world + 1))).item()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
