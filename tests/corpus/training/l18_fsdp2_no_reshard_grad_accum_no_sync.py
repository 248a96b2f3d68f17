"""FSDP2 with reshard_after_forward=False and gradient accumulation: `set_requires_gradient_sync(False)` for the
first two micro-batches (no reduce-scatter, unsharded gradients accumulate), True for the last; AdamW step;
parameters checked against one process.

EXPECTED: clean
WORLD_SIZE: 2
MODELLED ON: torch/distributed/fsdp/_fully_shard/_fully_shard.py `FSDPModule.set_requires_gradient_sync`
("this can be used to implement gradient accumulation *without* communication"), `reshard_after_forward=False`
(parameters stay unsharded between forward and backward, no second all-gather), torchtitan's gradient accumulation.
REASON: FSDP2's streams are ordered by events (_fsdp_param_group.py); the last backward reduce-scatters the
accumulated unsharded gradients and the final callback waits it before the optimizer; the gradient is the average
over ranks of the sum over micro-batches.
"""
import os
import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 6)).cuda()
    ref = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 6))
    ref.load_state_dict({k: v.cpu() for k, v in model.state_dict().items()})
    for layer in (model[0], model[2]):
        fully_shard(layer, reshard_after_forward=False)
    fully_shard(model, reshard_after_forward=False)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    M = 3
    data = {(r, m): torch.randn(2, 6, generator=torch.Generator().manual_seed(50 * r + m))
            for r in range(world) for m in range(M)}
    for step in range(2):
        for m in range(M):
            model.set_requires_gradient_sync(m == M - 1)
            model(data[rank, m].cuda() + step).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
        for r in range(world):
            for m in range(M):
                (ref(data[r, m] + step).pow(2).mean() / world).backward()
        ref_opt.step()
        ref_opt.zero_grad()
    for p, q in zip(model.parameters(), ref.parameters()):
        assert torch.allclose(p.full_tensor().cpu(), q.detach(), atol=1e-5), (p.full_tensor().cpu() - q).abs().max()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
