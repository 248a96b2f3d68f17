"""torch FSDP2 on a module built on the host, two Adam steps, then a torch.distributed.checkpoint (DCP) round trip.

EXPECTED: clean
REASON: fully_shard moves a host-built module's parameters to the mesh's device with `param.data = param.to(device)`
(torch/distributed/fsdp/_fully_shard/_fsdp_init.py _move_states_to_device), which on a GPU keeps each Parameter
object; FSDP2's all-gathers and reduce-scatters are ordered by FSDP2 itself (its all-gather / reduce-scatter
streams wait on and are waited for by the current stream), and DCP's save/load go through get_model_state_dict's
full-tensor gathers and blocking collectives. With the same input on every rank, the averaged gradient is each
rank's own, so the sharded training must equal plain Adam on the CPU, and the reloaded model must compute what
the trained one did. (simdist once ran the first op on a moved parameter into the CPU build's missing CUDA kernel
of as_strided: `host_tensor.data = simulated_tensor` left a half-simulated tensor.)
"""
import os
import tempfile

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn as nn
from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard


def model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def train(m, x, steps=2):
    opt = torch.optim.Adam(m.parameters(), lr=0.01)
    for _ in range(steps):
        opt.zero_grad()
        m(x).sum().backward()
        opt.step()


def main():
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl")
    mesh = init_device_mesh("cuda", (dist.get_world_size(),))
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(1))

    ref = model()
    train(ref, x)
    expected = ref(x).sum().item()

    m = model()  # built on the host: fully_shard moves it
    for layer in m:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(m, mesh=mesh)
    assert all(isinstance(p, nn.Parameter) and p.is_cuda for p in m.parameters())
    xd = x.cuda()
    train(m, xd)
    trained = m(xd).sum().item()
    assert abs(trained - expected) < 1e-5, (trained, expected)

    path = [tempfile.mkdtemp(prefix="dcp-") if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(path, src=0)
    dcp.save(get_model_state_dict(m), checkpoint_id=path[0])
    with torch.no_grad():
        for p in m.parameters():
            p.zero_()
    assert m(xd).sum().item() != trained
    sd = get_model_state_dict(m)
    dcp.load(sd, checkpoint_id=path[0])
    set_model_state_dict(m, sd)
    reloaded = m(xd).sum().item()
    assert reloaded == trained, (reloaded, trained)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
