"""Async all_reduce of grads, but optimizer.step() runs before work.wait().

EXPECTED: hazard
KINDS: read-after-write
KINDS_ALSO: write-after-read
REASON: async collective writes .grad on the NCCL stream; step reads .grad on the default stream with no wait (torch.distributed docs).
"""
import os
import torch
import torch.nn as nn
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    torch.manual_seed(0)
    model = nn.Linear(256, 256).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(32, 256, device="cuda") + rank
    model(x).square().mean().backward()
    works = [dist.all_reduce(p.grad, async_op=True) for p in model.parameters()]
    opt.step()                                   # BUG: before the waits
    for w in works:
        w.wait()
    print(model.weight.sum().item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
