"""The FSDP2 recipe of pytorch/examples (distributed/FSDP2/example.py) and torchtitan: no torch.cuda.set_device;
`init_process_group(device_id=cuda:LOCAL_RANK)`; the model built on the meta device, `fully_shard`, then
`to_empty(device=...)` and `reset_parameters()` on the DTensor shards (DTensor's RNG tracker offsets each shard's
draw), an Adam step. The ranks' gathered parameters agree, and the step equals a single-process CPU step from the
same initial weights.

EXPECTED: clean
WORLD_SIZE: 2
MODELLED ON: pytorch/examples distributed/FSDP2/example.py main(); torch/distributed/device_mesh.py
_setup_world_group_and_device (sets the device from LOCAL_RANK while CUDA is uninitialized); torch/distributed/tensor/_random.py
OffsetBasedRNGTracker (reads the 16-byte Philox state of torch.cuda.get_rng_state()).
REASON: FSDP2 places its all-gather buffers on the mesh's current device (_fsdp_init.py _get_device_from_mesh); the
device is the rank's because DeviceMesh set it (torch.manual_seed does not initialize CUDA: torch/cuda/random.py _lazy_call).
FSDP2 orders its collectives with the compute stream by events; the optimizer step follows the backward's final callback.
"""
import copy
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.fsdp import fully_shard


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 2 * dim)
        self.fc2 = nn.Linear(2 * dim, dim)

    def forward(self, x):
        return x + self.fc2(torch.relu(self.fc1(self.norm(x))))

    def reset_parameters(self):
        self.norm.reset_parameters()
        self.fc1.reset_parameters()
        self.fc2.reset_parameters()


class Model(nn.Module):
    def __init__(self, dim=16, n=2):
        super().__init__()
        self.layers = nn.ModuleList(Block(dim) for _ in range(n))
        self.head = nn.Linear(dim, 4)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.head(x)

    def reset_parameters(self):
        for layer in self.layers:
            layer.reset_parameters()
        self.head.reset_parameters()


def main():
    rank = int(os.environ["LOCAL_RANK"])
    device = torch.device(f"{torch.accelerator.current_accelerator()}:{rank}")
    dist.init_process_group(backend="nccl", device_id=device)
    torch.manual_seed(0)
    with torch.device("meta"):
        model = Model()
    for layer in model.layers:
        fully_shard(layer)
    fully_shard(model)
    assert torch.cuda.current_device() == rank, torch.cuda.current_device()
    model.to_empty(device=device)
    model.reset_parameters()
    full = {k: v.full_tensor().cpu() for k, v in model.state_dict().items()}
    gathered = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, full)
    for other in gathered:
        for k in full:
            assert torch.equal(other[k], full[k]), k
    ref = Model()
    ref.load_state_dict(full)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    ref_opt = torch.optim.Adam(ref.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(1)
    xs = [torch.randn(8, 16, generator=g) for _ in range(2 * dist.get_world_size())]
    for step in range(2):
        x = xs[2 * step + rank]
        model(x.to(device)).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
        ref_loss = sum(ref(xs[2 * step + r]).pow(2).mean() for r in range(dist.get_world_size())) / dist.get_world_size()
        ref_loss.backward()
        ref_opt.step()
        ref_opt.zero_grad()
    for k, v in model.state_dict().items():
        got = v.full_tensor().cpu()
        assert torch.allclose(got, ref.state_dict()[k], atol=1e-5, rtol=1e-4), (k, (got - ref.state_dict()[k]).abs().max())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
