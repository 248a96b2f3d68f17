"""DDP-like hook launches an async all_reduce of p.grad with a side stream current, but the side stream never
waits on the stream that produced the grad (the backward stream).

EXPECTED: hazard
KINDS: read-after-write
KINDS_ALSO: write-after-write,write-after-read
REASON: the async collective waits only on the side stream (current at issue); the grad was written on the default stream by backward.
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
    model = nn.Sequential(nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 128)).cuda()
    side = torch.cuda.Stream()
    works = []

    def hook(p):
        with torch.cuda.stream(side):               # BUG: no side.wait_stream(current stream)
            works.append(dist.all_reduce(p.grad, async_op=True))

    for p in model.parameters():
        p.register_post_accumulate_grad_hook(hook)
    model(torch.randn(64, 128, device="cuda") * (rank + 1)).square().mean().backward()
    for w in works:
        w.wait()
    torch.optim.SGD(model.parameters(), lr=0.1).step()
    print(model[0].weight.sum().item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
