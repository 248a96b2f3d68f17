"""Tensor parallelism with DTensor: parallelize_module with ColwiseParallel / RowwiseParallel for an MLP and a
ColwiseParallel(use_local_output=False) output projection whose vocab-sharded logits go to F.cross_entropy inside
`loss_parallel()`; backward; loss and gradients checked against one process.

EXPECTED: clean
WORLD_SIZE: 2
MODELLED ON: torchtitan's TP plan (`"output": ColwiseParallel(output_layouts=Shard(-1), use_local_output=False)`
with `loss_parallel()`), torch/distributed/tensor/parallel/loss.py (`loss_parallel`: cross entropy on a
Shard(-1) DTensor without gathering the vocabulary: all-reduce of max and sum-exp, Megatron's vocab-parallel CE).
REASON: DTensor's collectives are waited before their results are used (functional collectives); values follow from
the unpartitioned model (chain rule).
"""
import os
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, loss_parallel, parallelize_module


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(8, 16)
        self.down = nn.Linear(16, 8)
        self.output = nn.Linear(8, 12, bias=False)

    def forward(self, x):
        return self.output(self.down(torch.relu(self.up(x))))


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    mesh = init_device_mesh("cuda", (world,))
    torch.manual_seed(0)
    ref = Net()
    model = Net().cuda()
    model.load_state_dict({k: v.cuda() for k, v in ref.state_dict().items()})
    parallelize_module(model, mesh, {
        "up": ColwiseParallel(), "down": RowwiseParallel(),
        "output": ColwiseParallel(output_layouts=Shard(-1), use_local_output=False)})
    g = torch.Generator().manual_seed(5)
    x = torch.randn(6, 8, generator=g)
    target = torch.randint(0, 12, (6,), generator=g)
    logits = model(x.cuda())
    with loss_parallel():
        loss = F.cross_entropy(logits, target.cuda())
        loss.backward()
    ref_loss = F.cross_entropy(ref(x), target)
    ref_loss.backward()
    lv = loss.full_tensor() if hasattr(loss, "full_tensor") else loss
    assert torch.allclose(lv.cpu(), ref_loss.detach(), atol=1e-5), (lv, ref_loss)
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        assert torch.allclose(p.grad.full_tensor().cpu(), q.grad, atol=1e-5), name
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
