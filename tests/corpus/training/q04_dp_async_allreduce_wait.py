"""Manual data parallel with async all_reduce of every grad (AVG op), all work.wait() before optimizer.step().

EXPECTED: clean
REASON: work.wait() makes the current stream wait for the NCCL stream (torch.distributed docs, async_op).
"""
import copy
import os
import torch
import torch.nn as nn
import torch.distributed as dist


def make():
    torch.manual_seed(12)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    ref = make()
    gpu = copy.deepcopy(ref).cuda()
    g = torch.Generator().manual_seed(4)
    X, Y = torch.randn(8, 8, generator=g), torch.randn(8, 2, generator=g)
    opt_ref = torch.optim.SGD(ref.parameters(), lr=0.1)
    opt = torch.optim.SGD(gpu.parameters(), lr=0.1)
    for _ in range(3):
        opt_ref.zero_grad()
        nn.functional.mse_loss(ref(X), Y).backward()
        opt_ref.step()
        opt.zero_grad()
        nn.functional.mse_loss(gpu(X.chunk(world)[rank].cuda()), Y.chunk(world)[rank].cuda()).backward()
        works = [dist.all_reduce(p.grad, op=dist.ReduceOp.AVG, async_op=True) for p in gpu.parameters()]
        for w in works:
            w.wait()
        opt.step()
    for p, q in zip(ref.parameters(), gpu.parameters()):
        assert torch.allclose(p, q.detach().cpu(), atol=1e-5), (p - q.detach().cpu()).abs().max()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
