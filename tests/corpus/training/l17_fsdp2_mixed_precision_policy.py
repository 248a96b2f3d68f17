"""FSDP2 `fully_shard` with MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32): forward and backward in bf16
on all-gathered bf16 parameters, gradients reduce-scattered in fp32 into fp32 sharded gradients; two SGD steps;
ranks agree and the parameters stay close to an fp32 reference.

EXPECTED: clean
WORLD_SIZE: 2
MODELLED ON: torch/distributed/fsdp/_fully_shard/_fsdp_api.py `MixedPrecisionPolicy` and _fsdp_param.py (the cast to
param_dtype in the all-gather copy-in, the reduce-scatter in reduce_dtype), as torchtitan configures it.
REASON: FSDP2 orders its all-gather and reduce-scatter streams with the compute stream by events
(_fsdp_param_group.py wait_for_unshard / post_backward, _fsdp_collectives.py); the optimizer runs after
backward's final callback waited the reduce-scatter. bf16 rounding stays within 2e-2 of fp32 at this size.
"""
import os
import torch
import torch.distributed as dist
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).cuda()
    ref = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    ref.load_state_dict({k: v.cpu() for k, v in model.state_dict().items()})
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in (model[0], model[2]):
        fully_shard(layer, mp_policy=mp)
    fully_shard(model, mp_policy=mp)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for step in range(2):
        xs = [torch.randn(4, 8, generator=torch.Generator().manual_seed(step * 10 + r)) for r in range(world)]
        out = model(xs[rank].cuda())
        assert out.dtype == torch.bfloat16
        out.float().square().mean().backward()
        for p in model.parameters():
            assert p.grad.dtype == torch.float32 and p.dtype == torch.float32
        opt.step()
        opt.zero_grad()
        (sum(ref(x).square().mean() for x in xs) / world).backward()
        ref_opt.step()
        ref_opt.zero_grad()
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        full = p.full_tensor().cpu()
        assert torch.allclose(full, q.detach(), atol=2e-2), (name, (full - q).abs().max())
        gathered = [torch.empty_like(full).cuda() for _ in range(world)]
        dist.all_gather(gathered, full.cuda())
        assert all(torch.equal(g.cpu(), full) for g in gathered)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
