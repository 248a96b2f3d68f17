"""DDP-like hook (correct side.wait_stream), but the work.wait() calls are issued inside `with torch.cuda.stream(side)`,
then optimizer.step() runs on the default stream which never waited for side.

EXPECTED: hazard
KINDS: read-after-write
KINDS_ALSO: write-after-read
REASON: work.wait() makes the stream current at the wait (side) wait, not the default stream (torch.distributed docs).
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
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            works.append(dist.all_reduce(p.grad, async_op=True))

    for p in model.parameters():
        p.register_post_accumulate_grad_hook(hook)
    model(torch.randn(64, 128, device="cuda") * (rank + 1)).square().mean().backward()
    with torch.cuda.stream(side):
        for w in works:
            w.wait()                                 # orders `side`, not the default stream
    torch.optim.SGD(model.parameters(), lr=0.1).step()   # BUG: default stream never waited on side
    print(model[0].weight.sum().item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
