"""DDP-like overlap: register_post_accumulate_grad_hook launches an async all_reduce of p.grad from a side stream
that first waits on the current stream; after backward every work.wait() is called on the default stream; step.

EXPECTED: clean
REASON: side.wait_stream(current) orders the NCCL stream after the grad's producer; work.wait() orders the default stream after the collective.
"""
import copy
import os
import torch
import torch.nn as nn
import torch.distributed as dist


def make():
    torch.manual_seed(21)
    return nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 1))


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    ref = make()
    gpu = copy.deepcopy(ref).cuda()
    side = torch.cuda.Stream()
    works = []

    def hook(p):
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            p.grad.div_(world)
            works.append(dist.all_reduce(p.grad, async_op=True))

    for p in gpu.parameters():
        p.register_post_accumulate_grad_hook(hook)
    g = torch.Generator().manual_seed(8)
    X, Y = torch.randn(8, 8, generator=g), torch.randn(8, 1, generator=g)
    opt_ref = torch.optim.SGD(ref.parameters(), lr=0.1)
    opt = torch.optim.SGD(gpu.parameters(), lr=0.1)
    for _ in range(2):
        opt_ref.zero_grad()
        nn.functional.mse_loss(ref(X), Y).backward()
        opt_ref.step()
        opt.zero_grad()
        works.clear()
        nn.functional.mse_loss(gpu(X.chunk(world)[rank].cuda()), Y.chunk(world)[rank].cuda()).backward()
        assert len(works) == 6
        for w in works:
            w.wait()
        opt.step()
    for p, q in zip(ref.parameters(), gpu.parameters()):
        assert torch.allclose(p, q.detach().cpu(), atol=1e-5), (p - q.detach().cpu()).abs().max()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
