"""I7 with torch's own DistributedDataParallel: two buckets, two SGD steps (the reducer that replaced 2019's
queueReduction/syncReduction, with ProcessGroupNCCL's fix in place).

EXPECTED: clean
INCIDENT: https://github.com/pytorch/pytorch/pull/18465; plain-torch model of the 2019 flow:
tests/corpus/incidents/i07_torch_ddp_flat_bucket_{bug,fix}.py.
MODELLED ON: torch/nn/parallel/distributed.py `DistributedDataParallel` (bucket_cap_mb small enough for one bucket
per parameter) and torch/csrc/distributed/c10d/reducer.cpp (flat bucket views, all-reduce per bucket, the copy back
into `param.grad` after the work completes).
SIMPLIFIED: a two-layer MLP; no real-library buggy twin (the missing record_stream was in C++ and is fixed).
RULE: DDP's reducer finishes every bucket's all-reduce before backward returns (the current stream waits on the
work: reducer.cpp `finalize_backward`), so the optimizer reads reduced gradients.
WHAT SIMDIST SAYS: clean (torch's own DDP and its C++ Reducer run on simdist's process group; seeds 0-4); on a GPU
it is clean.
"""
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 8)).cuda()
    ref_model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 8))
    ref_model.load_state_dict({k: v.cpu() for k, v in model.state_dict().items()})
    ddp = DDP(model, bucket_cap_mb=0.005)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(ref_model.parameters(), lr=0.1)
    for step in range(2):
        xs = [torch.randn(4, 32, generator=torch.Generator().manual_seed(10 * step + r)) for r in range(world)]
        loss = ddp(xs[rank].cuda()).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        ref_loss = sum(ref_model(x).pow(2).mean() for x in xs) / world     # DDP averages the gradients
        ref_loss.backward()
        ref_opt.step()
        ref_opt.zero_grad()
    total = sum(p.sum().item() for p in model.parameters())
    print(f"rank {rank}: parameter sum after 2 steps {total:.5f}")
    for p, q in zip(model.parameters(), ref_model.parameters()):
        assert torch.allclose(p.detach().cpu(), q.detach(), atol=1e-5), "parameters differ from the reference"
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
