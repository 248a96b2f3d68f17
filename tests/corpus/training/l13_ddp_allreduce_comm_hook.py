"""torch DDP with `register_comm_hook(None, default_hooks.allreduce_hook)` and a custom hook built the documented
way (all_reduce async, `fut.then(...)` dividing by the world size), two steps each; parameters checked against one
process averaging the gradients.

EXPECTED: clean
WORLD_SIZE: 2
MODELLED ON: torch/distributed/algorithms/ddp_comm_hooks/default_hooks.py `allreduce_hook` (`_allreduce_fut`:
`tensor.div_(world)`, `dist.all_reduce(..., async_op=True).get_future().then(lambda fut: fut.value()[0])`) and the
DistributedDataParallel.register_comm_hook docstring example.
REASON: DDP's Reducer waits each bucket's returned future in finalize_backward (torch/csrc/distributed/c10d/
reducer.cpp), which makes the current stream wait for the future's events (a then() callback's included), so the
optimizer step reads the averaged gradients.
"""
import os
import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP


def custom_mean_hook(state, bucket):
    world = dist.get_world_size()
    fut = dist.all_reduce(bucket.buffer(), async_op=True).get_future()

    def div(f):
        return f.value()[0].div_(world)
    return fut.then(div)


def train(hook, rank, world):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).cuda()
    ref = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    ref.load_state_dict({k: v.cpu() for k, v in model.state_dict().items()})
    ddp = DDP(model, bucket_cap_mb=0.0005)
    ddp.register_comm_hook(None, hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.05)
    for step in range(2):
        xs = [torch.randn(4, 8, generator=torch.Generator().manual_seed(step * 10 + r)) for r in range(world)]
        ddp(xs[rank].cuda()).square().mean().backward()
        opt.step()
        opt.zero_grad()
        (sum(ref(x).square().mean() for x in xs) / world).backward()
        ref_opt.step()
        ref_opt.zero_grad()
    for p, q in zip(model.parameters(), ref.parameters()):
        assert torch.allclose(p.detach().cpu(), q.detach(), atol=1e-5)


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    train(default_hooks.allreduce_hook, rank, world)
    train(custom_mean_hook, rank, world)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
