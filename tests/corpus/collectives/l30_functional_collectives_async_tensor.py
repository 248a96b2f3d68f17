"""torch.distributed._functional_collectives: all_reduce, all_gather_tensor, reduce_scatter_tensor and
all_to_all_single return AsyncCollectiveTensors whose first use waits (wait_tensor); an explicit .wait(); values
checked; a second read after the wait.

EXPECTED: clean
WORLD_SIZE: 2
MODELLED ON: torch/distributed/_functional_collectives.py (what DTensor, FSDP2's tests and torchtitan's
context-parallel code use), `AsyncCollectiveTensor.__torch_dispatch__` (any op on the tensor calls wait_tensor
first) and `AsyncCollectiveTensor.wait()`.
REASON: _c10d_functional ops register their Work against the output; wait_tensor makes the current stream wait for
it (torch/csrc/distributed/c10d/Functional.cpp), and an AsyncCollectiveTensor waits before any op reads it.
"""
import os
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    group = dist.group.WORLD
    x = torch.arange(8, dtype=torch.float32, device="cuda") + rank
    s = funcol.all_reduce(x, "sum", group)
    y = s * 2                                     # the first op on the ACT waits
    exp = (torch.arange(8, dtype=torch.float32) * world + sum(range(world))) * 2
    assert torch.equal(y.cpu(), exp)
    g = funcol.all_gather_tensor(x, 0, group)
    assert torch.equal(g.cpu(), torch.cat([torch.arange(8, dtype=torch.float32) + r for r in range(world)]))
    rs = funcol.reduce_scatter_tensor(x, "sum", 0, group).wait()
    half = 8 // world
    assert torch.equal(rs.cpu(), (torch.arange(8, dtype=torch.float32) * world + sum(range(world)))[rank * half:(rank + 1) * half])
    a2a = funcol.all_to_all_single(x, [4, 4], [4, 4], group)
    exp_a2a = torch.cat([(torch.arange(8, dtype=torch.float32) + r)[rank * 4:(rank + 1) * 4] for r in range(world)])
    assert torch.equal(a2a.cpu(), exp_a2a), a2a.cpu()
    assert torch.equal((a2a + 0).cpu(), exp_a2a)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
