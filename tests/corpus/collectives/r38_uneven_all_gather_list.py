"""list all_gather where rank r contributes r+1 elements (output list sizes differ), and list reduce_scatter with uneven chunks.

EXPECTED: clean
WORLD_SIZE: 3
REASON: ProcessGroupNCCL implements all_gather with unequal output sizes as a coalesced group of broadcasts and reduce_scatter with unequal sizes as a coalesced group of reduces.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    world = dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    mine = torch.arange(rank + 1, device="cuda", dtype=torch.float32) + 10.0 * rank
    outs = [torch.empty(r + 1, device="cuda") for r in range(world)]
    dist.all_gather(outs, mine)
    for r in range(world):
        assert outs[r].tolist() == [k + 10.0 * r for k in range(r + 1)], (r, outs[r].tolist())
    ins = [torch.full((j + 2,), float(rank + 1), device="cuda") for j in range(world)]
    out = torch.empty(rank + 2, device="cuda")
    dist.reduce_scatter(out, ins)
    assert torch.all(out == float(sum(range(1, world + 1)))).item() and out.numel() == rank + 2
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
