"""all_gather_object and broadcast_object_list whose objects hold CUDA tensors: each tensor is pickled from its
rank's device and unpickled onto the device it was saved from (rank 1's tensor arrives on cuda:1 on every rank);
broadcast_object_list(device=...) stages the pickled bytes on the given device.

EXPECTED: clean
WORLD_SIZE: 2
MODELLED ON: checkpoint / metrics code exchanging dicts that hold CUDA tensors with the object collectives.
REASON: torch/distributed/distributed_c10d.py all_gather_object: "If any tensors in the object are GPU tensors ...
Calling all_gather_object() with GPU tensors is not well supported and inefficient as it incurs GPU -> CPU transfer
since tensors would be pickled"; unpickling a CUDA tensor restores it on its saved device (torch.load semantics
without map_location); every GPU of a node is visible to each torchrun process.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    obj = {"rank": rank, "t": torch.arange(3, device="cuda") * (rank + 1)}
    got = [None] * world
    dist.all_gather_object(got, obj)
    for r in range(world):
        assert got[r]["rank"] == r
        assert got[r]["t"].device == torch.device("cuda", r), got[r]["t"].device
        assert got[r]["t"].cpu().tolist() == [0, r + 1, 2 * (r + 1)]
    lst = [{"w": torch.full((2,), 7.0, device="cuda")}, "cfg"] if rank == 0 else [None, None]
    dist.broadcast_object_list(lst, src=0, device=torch.device("cuda", rank))
    assert lst[1] == "cfg" and lst[0]["w"].device == torch.device("cuda", 0)
    assert lst[0]["w"].cpu().tolist() == [7.0, 7.0]
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
