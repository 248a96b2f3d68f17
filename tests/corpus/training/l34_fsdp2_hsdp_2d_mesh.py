"""FSDP2 hybrid sharding (HSDP) on a 2-D mesh (replicate=2, shard=2) at world 4: parameters sharded within each
shard group and replicated across them; reduce-scatter over the shard dim, all-reduce over the replicate dim; two
SGD steps; full parameters checked against one process on the global batch.

EXPECTED: clean
WORLD_SIZE: 4
MODELLED ON: torch/distributed/fsdp/_fully_shard/_fully_shard.py `fully_shard(module, mesh=2-D mesh)` ("If mesh is
2D, then parameters are sharded across the 1st dim and replicated across the 0th dim"), torchtitan's
data_parallel_replicate x data_parallel_shard.
REASON: FSDP2 orders its collectives by events on its own streams and the final backward callback waits the
reduce-scatter and the all-reduce; the gradient is the average over all four ranks' batches.
"""
import os
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    mesh = init_device_mesh("cuda", (2, 2), mesh_dim_names=("replicate", "shard"))
    torch.manual_seed(9)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4)).cuda()
    ref = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4))
    ref.load_state_dict({k: v.cpu() for k, v in model.state_dict().items()})
    fully_shard(model[0], mesh=mesh)
    fully_shard(model[2], mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for step in range(2):
        xs = [torch.randn(2, 4, generator=torch.Generator().manual_seed(20 * step + r)) for r in range(world)]
        model(xs[rank].cuda()).square().mean().backward()
        opt.step()
        opt.zero_grad()
        (sum(ref(x).square().mean() for x in xs) / world).backward()
        ref_opt.step()
        ref_opt.zero_grad()
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        assert torch.allclose(p.full_tensor().cpu(), q.detach(), atol=1e-5), name
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
