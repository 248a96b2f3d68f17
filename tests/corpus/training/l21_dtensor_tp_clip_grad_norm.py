"""torch.nn.utils.clip_grad_norm_ over tensor-parallel DTensor parameters (ColwiseParallel / RowwiseParallel): the
total norm is computed across shards (partial norms all-reduced) and every gradient is scaled by one factor; the
norm and the clipped gradients checked against one process.

EXPECTED: clean
WORLD_SIZE: 2
MODELLED ON: torchtitan's `clip_grad_norm_` over DTensor parameters (torch/nn/utils/clip_grad.py
`_get_total_norm` on DTensors: the norm of a Shard placement is a Partial DTensor, made a Replicate by
`full_tensor()`), a SGD step after it.
REASON: DTensor's collectives are waited before use (functional collectives); the total norm is the 2-norm of every
full gradient, clip factor max_norm / (norm + 1e-6) clamped to 1.
"""
import os
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    mesh = init_device_mesh("cuda", (world,))
    torch.manual_seed(0)
    ref = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8))
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8)).cuda()
    model.load_state_dict({k: v.cuda() for k, v in ref.state_dict().items()})
    parallelize_module(model, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    x = torch.randn(5, 8, generator=torch.Generator().manual_seed(1)) * 4
    model(x.cuda()).square().sum().backward()
    ref(x).square().sum().backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
    ref_norm = torch.nn.utils.clip_grad_norm_(ref.parameters(), max_norm=1.0)
    n = norm.full_tensor() if isinstance(norm, DTensor) else norm
    assert torch.allclose(n.cpu(), ref_norm, rtol=1e-5), (n, ref_norm)
    assert ref_norm.item() > 1.0
    for p, q in zip(model.parameters(), ref.parameters()):
        assert torch.allclose(p.grad.full_tensor().cpu(), q.grad, atol=1e-6)
    torch.optim.SGD(model.parameters(), lr=0.1).step()
    torch.optim.SGD(ref.parameters(), lr=0.1).step()
    for p, q in zip(model.parameters(), ref.parameters()):
        assert torch.allclose(p.full_tensor().cpu(), q.detach(), atol=1e-6)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
