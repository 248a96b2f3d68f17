"""torch.nn.parallel.DistributedDataParallel at world 2: an MLP, small gradient buckets (several all-reduces in
flight during backward), Adam, 3 steps; each rank trains on its half of the global batch.

    torchrun --standalone --nproc-per-node=2 tests/real_libs/torch_ddp.py

The full weights are drawn from a seeded generator on every rank (DDP would broadcast rank 0's anyway), so
tests/real_libs/reference.py can compute the same training in one process. Each rank prints one line
`RESULT {json}`: its losses and a checksum of each parameter after the last step.
"""

import json
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

H, FFN = 16, 32
GLOBAL_BATCH = 8
STEPS, LR = 3, 1e-2


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(H, FFN)
        self.fc2 = nn.Linear(FFN, FFN)
        self.fc3 = nn.Linear(FFN, H)

    def forward(self, x):
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


def full_weights():
    g = torch.Generator().manual_seed(0)
    return {
        "fc1.weight": torch.randn(FFN, H, generator=g) * 0.3,
        "fc1.bias": torch.randn(FFN, generator=g) * 0.1,
        "fc2.weight": torch.randn(FFN, FFN, generator=g) * 0.2,
        "fc2.bias": torch.randn(FFN, generator=g) * 0.1,
        "fc3.weight": torch.randn(H, FFN, generator=g) * 0.3,
        "fc3.bias": torch.randn(H, generator=g) * 0.1,
    }


def batch(step):
    g = torch.Generator().manual_seed(1000 + step)
    return torch.randn(GLOBAL_BATCH, H, generator=g), torch.randn(GLOBAL_BATCH, H, generator=g)


def checksum(t):
    t = t.detach().double().flatten().cpu()
    w = torch.linspace(-1.0, 1.0, t.numel(), dtype=torch.float64)
    return [t.sum().item(), (t * t).sum().item(), (t * w).sum().item()]


def main():
    local_rank = int(os.environ["LOCAL_RANK"])
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
        backend = "nccl"
    else:
        device = torch.device("cpu")
        backend = "gloo"
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)

    model = MLP().to(device)
    with torch.no_grad():
        for name, full in full_weights().items():
            model.get_parameter(name).copy_(full)
    # ~1.1 KB buckets: fc3, fc2 and fc1 each get their own all-reduce
    ddp = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None, bucket_cap_mb=0.001)
    optimizer = torch.optim.Adam(ddp.parameters(), lr=LR)

    per_rank = GLOBAL_BATCH // world
    losses = []
    for step in range(STEPS):
        x, y = batch(step)
        x = x[rank * per_rank:(rank + 1) * per_rank].to(device)
        y = y[rank * per_rank:(rank + 1) * per_rank].to(device)
        loss = nn.functional.mse_loss(ddp(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())

    params = {name: {"shard": None, "checksum": checksum(p)} for name, p in model.named_parameters()}
    print("RESULT " + json.dumps({"rank": rank, "losses": losses, "params": params}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
