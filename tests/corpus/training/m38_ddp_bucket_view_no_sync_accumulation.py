"""torch DDP with gradient_as_bucket_view=True, gradient accumulation with no_sync() (one micro-batch without
all-reduce, the next with), SGD with momentum, 3 steps; each rank trains on its half of the
global batch. Weights checked against a single-process CPU run on the full batch (the accumulated gradient of two
micro-batches, averaged over ranks).

EXPECTED: clean
REASON: torch/nn/parallel/distributed.py: no_sync() skips the all-reduce and accumulates local grads, the next synced backward all-reduces the accumulated grads (averaged over world size); gradient_as_bucket_view makes .grad views of the buckets, which zero_grad(set_to_none=False) zeroes in place (https://pytorch.org/docs/stable/notes/ddp.html).
"""
import copy
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

STEPS, MICRO, LR = 3, 2, 0.05


def make_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 4))


def data(step, micro):
    g = torch.Generator().manual_seed(100 * step + micro)
    return torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    ref = make_model()
    model = copy.deepcopy(ref).cuda()
    ddp = DDP(model, device_ids=[local], gradient_as_bucket_view=True, bucket_cap_mb=0.001)
    opt = torch.optim.SGD(ddp.parameters(), lr=LR, momentum=0.9)
    opt_ref = torch.optim.SGD(ref.parameters(), lr=LR, momentum=0.9)
    per = 8 // world
    for step in range(STEPS):
        opt.zero_grad(set_to_none=False)
        opt_ref.zero_grad()
        for m in range(MICRO):
            x, y = data(step, m)
            xs, ys = x[rank * per:(rank + 1) * per].cuda(), y[rank * per:(rank + 1) * per].cuda()
            if m < MICRO - 1:
                with ddp.no_sync():
                    nn.functional.mse_loss(ddp(xs), ys).backward()
            else:
                nn.functional.mse_loss(ddp(xs), ys).backward()
            # the reference: mean over ranks of each rank's loss = loss on the full batch (equal shards)
            nn.functional.mse_loss(ref(x), y).backward()
        opt.step()
        opt_ref.step()
    for p, q in zip(ref.parameters(), model.parameters()):
        assert q.grad.data_ptr() != 0
        assert torch.allclose(p.detach(), q.detach().cpu(), rtol=1e-4, atol=1e-5), (p - q.detach().cpu()).abs().max()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
