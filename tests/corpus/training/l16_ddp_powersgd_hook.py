"""torch DDP with the PowerSGD comm hook (rank-1 approximation, two vanilla all-reduce iterations first): four steps;
all ranks end with identical parameters, the first two steps equal plain averaged SGD.

EXPECTED: clean
WORLD_SIZE: 2
MODELLED ON: torch/distributed/algorithms/ddp_comm_hooks/powerSGD_hook.py `PowerSGDState`, `powerSGD_hook`
(start_powerSGD_iter: vanilla allreduce before it; then the P/Q all-reduces with `async_op=True` chained by
`.then()` callbacks, orthogonalization, error feedback).
REASON: every all-reduce is consumed through a future chain the Reducer waits (reducer.cpp finalize_backward);
PowerSGD's Q is drawn from a torch.Generator seeded identically on every rank, so compressed gradients, and the
parameters, are identical across ranks.
"""
import os
import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powerSGD
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Tanh(), torch.nn.Linear(16, 8)).cuda()
    ref = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Tanh(), torch.nn.Linear(16, 8))
    ref.load_state_dict({k: v.cpu() for k, v in model.state_dict().items()})
    ddp = DDP(model)
    state = powerSGD.PowerSGDState(process_group=None, matrix_approximation_rank=1, start_powerSGD_iter=2,
                                   min_compression_rate=0.5, use_error_feedback=True, warm_start=True)
    ddp.register_comm_hook(state, powerSGD.powerSGD_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for step in range(4):
        xs = [torch.randn(4, 16, generator=torch.Generator().manual_seed(10 * step + r)) for r in range(world)]
        ddp(xs[rank].cuda()).square().mean().backward()
        opt.step()
        opt.zero_grad()
        if step < 2:
            (sum(ref(x).square().mean() for x in xs) / world).backward()
            ref_opt.step()
            ref_opt.zero_grad()
            for p, q in zip(model.parameters(), ref.parameters()):
                assert torch.allclose(p.detach().cpu(), q.detach(), atol=1e-5), step
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    all_flat = [torch.empty_like(flat) for _ in range(world)]
    dist.all_gather(all_flat, flat)
    for f in all_flat:
        assert torch.equal(f.cpu(), flat.cpu()), "ranks diverged under PowerSGD"
    assert not torch.isnan(flat).any().item()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
