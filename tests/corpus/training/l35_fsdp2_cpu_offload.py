"""FSDP2 with CPUOffloadPolicy(pin_memory=True): sharded parameters and gradients live on the host (pinned), are
copied to the GPU for the all-gather and back after the reduce-scatter; the optimizer steps on the CPU; two steps
checked against one process.

EXPECTED: clean
WORLD_SIZE: 2
MODELLED ON: torch/distributed/fsdp/_fully_shard/_fsdp_api.py `CPUOffloadPolicy` and _fsdp_param.py / _fsdp_collectives.py
(the non_blocking H2D copy of the sharded parameter before the all-gather, the D2H copy of the reduced gradient
into a pinned buffer, and the host waiting it before the optimizer: `foreach_reduce` records an event and
`FSDPParamGroup.post_backward`/the root's final callback synchronize it).
REASON: FSDP2 synchronizes the D2H gradient copy before the CPU optimizer reads it (the offload's
`non_blocking=True` copy is followed by an event synchronize); values are the unsharded model's.
"""
import os
import torch
import torch.distributed as dist
from torch.distributed.fsdp import CPUOffloadPolicy, fully_shard


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    torch.manual_seed(10)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2)).cuda()
    ref = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    ref.load_state_dict({k: v.cpu() for k, v in model.state_dict().items()})
    policy = CPUOffloadPolicy(pin_memory=True)
    fully_shard(model[0], offload_policy=policy)
    fully_shard(model[2], offload_policy=policy)
    fully_shard(model, offload_policy=policy)
    for p in model.parameters():
        assert p.to_local().device.type == "cpu"
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for step in range(2):
        xs = [torch.randn(3, 4, generator=torch.Generator().manual_seed(5 * step + r)) for r in range(world)]
        model(xs[rank].cuda()).square().mean().backward()
        opt.step()
        opt.zero_grad()
        (sum(ref(x).square().mean() for x in xs) / world).backward()
        ref_opt.step()
        ref_opt.zero_grad()
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        local = p.to_local()                      # a host shard: gathered on the GPU (NCCL has no CPU tensors)
        assert local.device.type == "cpu"
        parts = [torch.empty_like(local, device="cuda") for _ in range(world)]
        dist.all_gather(parts, local.cuda())
        full = torch.cat(parts)[:q.shape[0]].cpu()
        assert torch.allclose(full, q.detach(), atol=1e-5), name
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
