"""torch.distributed.optim.ZeroRedundancyOptimizer (Adam partitioned over the ranks) under torch DDP: each rank
steps its parameter partition and the updated parameters are broadcast from their owners; three steps checked
against plain Adam on the averaged gradients; consolidate_state_dict to rank 0.

EXPECTED: clean
WORLD_SIZE: 2
MODELLED ON: torch/distributed/optim/zero_redundancy_optimizer.py `ZeroRedundancyOptimizer(params,
optimizer_class=torch.optim.Adam)` (`_sync_params`: dist.broadcast of each owner's parameters, async with
work.wait(); `consolidate_state_dict(to=0)`: broadcast_object_list of the partitions' states).
REASON: the broadcasts are waited before step() returns (zero_redundancy_optimizer.py `_sync_params`), DDP's Reducer
waits the gradient all-reduce before backward returns; values are plain Adam's.
"""
import os
import torch
import torch.distributed as dist
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    torch.manual_seed(13)
    model = torch.nn.Sequential(torch.nn.Linear(6, 6), torch.nn.ReLU(), torch.nn.Linear(6, 6),
                                torch.nn.ReLU(), torch.nn.Linear(6, 2)).cuda()
    ref = torch.nn.Sequential(torch.nn.Linear(6, 6), torch.nn.ReLU(), torch.nn.Linear(6, 6),
                              torch.nn.ReLU(), torch.nn.Linear(6, 2))
    ref.load_state_dict({k: v.cpu() for k, v in model.state_dict().items()})
    ddp = DDP(model)
    opt = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=torch.optim.Adam, lr=1e-2)
    ref_opt = torch.optim.Adam(ref.parameters(), lr=1e-2)
    for step in range(3):
        xs = [torch.randn(4, 6, generator=torch.Generator().manual_seed(11 * step + r)) for r in range(world)]
        ddp(xs[rank].cuda()).square().mean().backward()
        opt.step()
        opt.zero_grad()
        (sum(ref(x).square().mean() for x in xs) / world).backward()
        ref_opt.step()
        ref_opt.zero_grad()
    for p, q in zip(model.parameters(), ref.parameters()):
        assert torch.allclose(p.detach().cpu(), q.detach(), atol=1e-5)
    opt.consolidate_state_dict(to=0)
    if rank == 0:
        sd = opt.state_dict()
        assert len(sd["state"]) == len(list(model.parameters()))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
