"""torch DDP with uneven inputs under the Join context manager: rank 0 has 3 batches, rank 1 has 2; once rank 1 is
out of data it shadows rank 0's all-reduces with zeros, so rank 0's third step averages its gradient with a zero
contribution (divide_by_initial_world_size); parameters checked on both ranks against one process.

EXPECTED: clean
WORLD_SIZE: 2
MODELLED ON: torch/distributed/algorithms/join.py `Join([ddp])` and torch/nn/parallel/distributed.py
`_DDPJoinHook` (the joined rank's `_match_all_reduce_for_bwd_pass`: all-reduces zeros for each bucket, and the
per-iteration all_reduce of the "still joined" flag), the documented pattern for uneven inputs.
REASON: the joined rank issues the same collectives with zero gradients; divide_by_initial_world_size=True (the
default) divides by 2, so rank 0's last gradient is g / 2; Join's final all-reduce syncs the buffers and parameters
are broadcast from the last joined rank (rank 0) at the end (`_sync_final_model`).
"""
import os
import torch
import torch.distributed as dist
from torch.distributed.algorithms.join import Join
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    torch.manual_seed(14)
    model = torch.nn.Linear(4, 3).cuda()
    ref = torch.nn.Linear(4, 3)
    ref.load_state_dict({k: v.cpu() for k, v in model.state_dict().items()})
    ddp = DDP(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    n_batches = [3, 2]
    data = {(r, i): torch.randn(2, 4, generator=torch.Generator().manual_seed(10 * r + i))
            for r in range(world) for i in range(max(n_batches))}
    with Join([ddp]):
        for i in range(n_batches[rank]):
            ddp(data[rank, i].cuda()).square().sum().backward()
            opt.step()
            opt.zero_grad()
    for i in range(max(n_batches)):
        active = [r for r in range(world) if i < n_batches[r]]
        (sum(ref(data[r, i]).square().sum() for r in active) / world).backward()
        ref_opt.step()
        ref_opt.zero_grad()
    for p, q in zip(model.parameters(), ref.parameters()):
        assert torch.allclose(p.detach().cpu(), q.detach(), atol=1e-5), (rank, p, q)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
