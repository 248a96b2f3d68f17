"""all_gather_object with CPU tensors inside dicts, broadcast_object_list from src=1, gather_object to dst=2, scatter_object_list from src=1.

EXPECTED: clean
WORLD_SIZE: 3
REASON: object collectives pickle on the host; results equal the per-rank objects by definition.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    world = dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    obj = {"rank": rank, "t": torch.arange(3) * rank, "name": "r%d" % rank}
    got = [None] * world
    dist.all_gather_object(got, obj)
    for r in range(world):
        assert got[r]["rank"] == r and got[r]["name"] == "r%d" % r
        assert torch.equal(got[r]["t"], torch.arange(3) * r)
    lst = [{"cfg": 1.5}, torch.tensor([9, 8]), "x"] if rank == 1 else [None, None, None]
    dist.broadcast_object_list(lst, src=1)
    assert lst[0] == {"cfg": 1.5} and torch.equal(lst[1], torch.tensor([9, 8])) and lst[2] == "x"
    gl = [None] * world if rank == 2 else None
    dist.gather_object(("g", rank), gl, dst=2)
    if rank == 2:
        assert gl == [("g", r) for r in range(world)], gl
    outl = [None]
    dist.scatter_object_list(outl, [{"k": 10 * j} for j in range(world)] if rank == 1 else None, src=1)
    assert outl[0] == {"k": 10 * rank}, outl
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
