"""torch DDP with static_graph=True and gradient_as_bucket_view=True (gradients are views into the flat buckets),
three AdamW steps with zero_grad(set_to_none=False); parameters checked against one process; the gradients stay
views of DDP's buckets.

EXPECTED: clean
WORLD_SIZE: 2
MODELLED ON: torch/nn/parallel/distributed.py `DistributedDataParallel(static_graph=True,
gradient_as_bucket_view=True)` (the memory-saving configuration: "gradients will be views pointing to different
offsets of allreduce communication buckets").
REASON: the Reducer all-reduces each bucket (the gradients themselves, as views) and waits it in finalize_backward
(reducer.cpp) before backward returns; the result is the average of the ranks' gradients.
"""
import os
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    torch.manual_seed(5)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.SiLU(), torch.nn.Linear(8, 2)).cuda()
    ref = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.SiLU(), torch.nn.Linear(8, 2))
    ref.load_state_dict({k: v.cpu() for k, v in model.state_dict().items()})
    ddp = DDP(model, static_graph=True, gradient_as_bucket_view=True, bucket_cap_mb=0.0002)
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-2)
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    for step in range(3):
        xs = [torch.randn(3, 8, generator=torch.Generator().manual_seed(7 * step + r)) for r in range(world)]
        ddp(xs[rank].cuda()).square().mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=False)
        (sum(ref(x).square().mean() for x in xs) / world).backward()
        ref_opt.step()
        ref_opt.zero_grad(set_to_none=False)
    for p, q in zip(model.parameters(), ref.parameters()):
        assert torch.allclose(p.detach().cpu(), q.detach(), atol=1e-5)
        assert p.grad is not None and torch.all(p.grad.cpu() == 0).item()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
