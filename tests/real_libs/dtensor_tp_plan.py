"""DeviceMesh + DTensor tensor parallelism at world 2: `parallelize_module` with a plan of ColwiseParallel /
RowwiseParallel pairs over a 4-layer MLP (the Megatron-style MLP split: column-sharded up projection, row-sharded
down projection whose partial sums are all-reduced), Adam on the DTensor parameters, 3 steps on the full batch
(tensor parallelism: every rank sees the same data).

    torchrun --standalone --nproc-per-node=2 tests/real_libs/dtensor_tp_plan.py

The full weights are drawn from a seeded generator on every rank before sharding, so tests/real_libs/reference.py
can compute the same training in one process. Each rank prints one line `RESULT {json}`: its losses and a checksum
of each full parameter (DTensor.full_tensor()) after the last step.
"""

import json
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

H, FFN = 16, 32
GLOBAL_BATCH = 8
STEPS, LR = 3, 1e-2


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.up1 = nn.Linear(H, FFN)
        self.down1 = nn.Linear(FFN, H)
        self.up2 = nn.Linear(H, FFN)
        self.down2 = nn.Linear(FFN, H)

    def forward(self, x):
        h = self.down1(torch.relu(self.up1(x)))
        return self.down2(torch.relu(self.up2(h)))


def full_weights():
    g = torch.Generator().manual_seed(0)
    w = {}
    for i in (1, 2):
        w[f"up{i}.weight"] = torch.randn(FFN, H, generator=g) * 0.3
        w[f"up{i}.bias"] = torch.randn(FFN, generator=g) * 0.1
        w[f"down{i}.weight"] = torch.randn(H, FFN, generator=g) * 0.3
        w[f"down{i}.bias"] = torch.randn(H, generator=g) * 0.1
    return w


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
        device_type = "cuda"
        backend = "nccl"
    else:
        device_type = "cpu"
        backend = "gloo"
    dist.init_process_group(backend)
    rank = dist.get_rank()
    torch.manual_seed(0)
    mesh = init_device_mesh(device_type, (dist.get_world_size(),), mesh_dim_names=("tp",))

    model = MLP().to(device_type)
    with torch.no_grad():
        for name, full in full_weights().items():
            model.get_parameter(name).copy_(full)
    plan = {"up1": ColwiseParallel(), "down1": RowwiseParallel(), "up2": ColwiseParallel(), "down2": RowwiseParallel()}
    parallelize_module(model, mesh, plan)
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)

    losses = []
    for step in range(STEPS):
        x, y = batch(step)
        loss = nn.functional.mse_loss(model(x.to(device_type)), y.to(device_type))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())

    params = {name: {"shard": None, "checksum": checksum(p.full_tensor())} for name, p in model.named_parameters()}
    print("RESULT " + json.dumps({"rank": rank, "losses": losses, "params": params}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
