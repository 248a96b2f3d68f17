"""FSDP2 with reshard_after_forward=2 on a world of 4: after forward each layer's parameters are resharded to a
world of 2 (each pair of ranks keeps half of each parameter) instead of 4, so backward's all-gather runs over the
smaller world; the root keeps its default; two SGD steps checked against one process.

EXPECTED: clean
WORLD_SIZE: 4
MODELLED ON: torch/distributed/fsdp/_fully_shard/_fully_shard.py `fully_shard(reshard_after_forward: bool | int)`
("If an int, then this represents the world size to reshard to after forward. It should be a non-trivial divisor
of the mesh shard dim size ... This allows the all-gather in backward to be over a smaller world size at the cost
of higher memory usage"); _fsdp_init.py _get_post_forward_mesh_info (the post-forward mesh of that size).
REASON: FSDP2's post-forward reshard and the backward all-gather over the smaller mesh are ordered by its events like
the full reshard; values are the unsharded model's.
"""
import os
import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    torch.manual_seed(16)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.GELU(), torch.nn.Linear(8, 4)).cuda()
    ref = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.GELU(), torch.nn.Linear(8, 4))
    ref.load_state_dict({k: v.cpu() for k, v in model.state_dict().items()})
    for layer in (model[0], model[2]):
        fully_shard(layer, reshard_after_forward=2)
    fully_shard(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for step in range(2):
        xs = [torch.randn(3, 4, generator=torch.Generator().manual_seed(4 * step + r)) for r in range(world)]
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
