"""FSDP2 with explicit prefetching: set_modules_to_forward_prefetch / set_modules_to_backward_prefetch over four
fully_shard'ed layers, a root unshard(async_op=True) before the forward; two Adam steps; losses and parameters
checked against one process.

EXPECTED: clean
WORLD_SIZE: 2
MODELLED ON: torch/distributed/fsdp/_fully_shard/_fully_shard.py `FSDPModule.set_modules_to_forward_prefetch`,
`set_modules_to_backward_prefetch`, `unshard(async_op=True)` (the FSDP2 tutorial's explicit prefetching, as
torchtitan enables it).
REASON: prefetched all-gathers run on FSDP's all-gather stream and each module's pre-forward / pre-backward waits
their events (_fsdp_param_group.py wait_for_unshard); an unshard handle left unwaited is waited in the module's
pre-forward ("FSDP will wait on the pending unshard in the module's pre-forward"). Values are the unsharded model's.
"""
import os
import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard


def make():
    return torch.nn.Sequential(*[torch.nn.Linear(8, 8) for _ in range(4)])


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    torch.manual_seed(6)
    model = make().cuda()
    ref = make()
    ref.load_state_dict({k: v.cpu() for k, v in model.state_dict().items()})
    layers = list(model)
    for layer in layers:
        fully_shard(layer)
    fully_shard(model)
    for i, layer in enumerate(layers):
        if i + 1 < len(layers):
            layer.set_modules_to_forward_prefetch([layers[i + 1]])
        if i > 0:
            layer.set_modules_to_backward_prefetch([layers[i - 1]])
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    ref_opt = torch.optim.Adam(ref.parameters(), lr=1e-2)
    for step in range(2):
        xs = [torch.randn(2, 8, generator=torch.Generator().manual_seed(3 * step + r)) for r in range(world)]
        layers[0].unshard(async_op=True)
        loss = torch.tanh(model(xs[rank].cuda())).sum()
        loss.backward()
        opt.step()
        opt.zero_grad()
        ref_loss = [torch.tanh(ref(x)).sum() for x in xs]
        assert torch.allclose(loss.detach().cpu(), ref_loss[rank].detach(), atol=1e-5)
        (sum(ref_loss) / world).backward()
        ref_opt.step()
        ref_opt.zero_grad()
    for p, q in zip(model.parameters(), ref.parameters()):
        assert torch.allclose(p.full_tensor().cpu(), q.detach(), atol=1e-5)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
