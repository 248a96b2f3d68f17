"""DDP-style gradient bucket: flatten grads, all_reduce, average, unflatten and copy back.

EXPECTED: clean
REASON: everything runs on the default stream with a synchronous collective (ordered on the current stream).
"""
import os
import torch
import torch.distributed as dist
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    world = dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    shapes = [(16, 8), (8,), (4, 4, 2), (3,)]
    grads = [torch.full(s, float(rank + i), device="cuda") for i, s in enumerate(shapes)]
    flat = _flatten_dense_tensors(grads)
    dist.all_reduce(flat)
    flat.div_(world)
    for g, synced in zip(grads, _unflatten_dense_tensors(flat, grads)):
        g.copy_(synced)
    mean_rank = sum(range(world)) / world
    for i, g in enumerate(grads):
        assert torch.allclose(g.cpu(), torch.full(shapes[i], mean_rank + i)), (i, g)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
