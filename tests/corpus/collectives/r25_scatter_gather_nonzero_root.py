"""scatter from src=1 and gather to dst=2 in a 3-rank world.

EXPECTED: clean
WORLD_SIZE: 3
REASON: only the root passes scatter_list / gather_list; values follow from the definitions.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    world = dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    out = torch.empty(64, device="cuda")
    sl = [torch.full((64,), 7.0 * j + 1, device="cuda") for j in range(world)] if rank == 1 else None
    dist.scatter(out, scatter_list=sl, src=1)
    assert torch.all(out == 7.0 * rank + 1).item(), out[0].item()

    mine = torch.arange(16, device="cuda", dtype=torch.float32) * (rank + 1)
    gl = [torch.empty(16, device="cuda") for _ in range(world)] if rank == 2 else None
    dist.gather(mine, gather_list=gl, dst=2)
    if rank == 2:
        for j in range(world):
            assert torch.equal(gl[j].cpu(), torch.arange(16, dtype=torch.float32) * (j + 1)), j
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
