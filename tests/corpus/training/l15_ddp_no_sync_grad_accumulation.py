"""torch DDP gradient accumulation: two micro-batches under `ddp.no_sync()` (no all-reduce, local accumulation),
the third outside it (one all-reduce of the accumulated gradients), then the step; checked against one process.

EXPECTED: clean
WORLD_SIZE: 2
MODELLED ON: torch/nn/parallel/distributed.py `DistributedDataParallel.no_sync` ("gradients will be accumulated on
module variables, which will later be synchronized in the first forward-backward pass exiting the context").
REASON: the Reducer all-reduces the accumulated bucket at the synchronizing backward and waits it before backward
returns (reducer.cpp finalize_backward); the result is the average over ranks of the sum over micro-batches.
"""
import os
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    torch.manual_seed(2)
    model = torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.GELU(), torch.nn.Linear(12, 3)).cuda()
    ref = torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.GELU(), torch.nn.Linear(12, 3))
    ref.load_state_dict({k: v.cpu() for k, v in model.state_dict().items()})
    ddp = DDP(model, bucket_cap_mb=0.0002)
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-2)
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    data = {(r, m): torch.randn(2, 6, generator=torch.Generator().manual_seed(100 * r + m))
            for r in range(world) for m in range(3)}
    for m in range(3):
        if m < 2:
            with ddp.no_sync():
                ddp(data[rank, m].cuda()).pow(2).mean().backward()
        else:
            ddp(data[rank, m].cuda()).pow(2).mean().backward()
    opt.step()
    for r in range(world):
        for m in range(3):
            (ref(data[r, m]).pow(2).mean() / world).backward()
    ref_opt.step()
    for p, q in zip(model.parameters(), ref.parameters()):
        assert torch.allclose(p.detach().cpu(), q.detach(), atol=1e-5), (p, q)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
