"""torch DDP with find_unused_parameters=True and a branch that rank 1 never uses in one step: the unused
parameter's gradient is still averaged (its local contribution zero), two SGD steps checked against one process.

EXPECTED: clean
WORLD_SIZE: 2
MODELLED ON: torch/nn/parallel/distributed.py `DistributedDataParallel(find_unused_parameters=True)` (models with
data-dependent branches: MoE gates, multi-task heads); the Reducer's local_used_map, copied to the device through
a pinned staging tensor and all-reduced (torch/csrc/distributed/c10d/reducer.cpp all_reduce_local_used_map).
REASON: parameters unused on a rank are marked ready at the end of its backward and reduced with a zero
contribution; the Reducer waits every bucket before backward returns (reducer.cpp finalize_backward). A
parameter used by no rank keeps no gradient.
"""
import os
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


class TwoHeads(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Linear(4, 4)
        self.head_a = torch.nn.Linear(4, 2)
        self.head_b = torch.nn.Linear(4, 2)

    def forward(self, x, use_b):
        h = torch.relu(self.body(x))
        return self.head_b(h) if use_b else self.head_a(h)


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    torch.manual_seed(8)
    model = TwoHeads().cuda()
    ref = TwoHeads()
    ref.load_state_dict({k: v.cpu() for k, v in model.state_dict().items()})
    ddp = DDP(model, find_unused_parameters=True)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for step in range(2):
        uses = [r == 0 and step == 0 for r in range(world)]      # step 0: rank 0 uses head_b; step 1: nobody
        xs = [torch.randn(3, 4, generator=torch.Generator().manual_seed(10 * step + r)) for r in range(world)]
        ddp(xs[rank].cuda(), uses[rank]).square().sum().backward()
        if step == 1:
            assert model.head_b.weight.grad is None or torch.all(model.head_b.weight.grad == 0).item()
        opt.step()
        opt.zero_grad()
        (sum(ref(x, u).square().sum() for x, u in zip(xs, uses)) / world).backward()
        ref_opt.step()
        ref_opt.zero_grad()
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        assert torch.allclose(p.detach().cpu(), q.detach(), atol=1e-5), name
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
