"""Object collectives carrying CUDA tensors: rank 0 scatters per-rank work items (a dict with a CUDA index tensor)
with scatter_object_list, every rank gathers a metrics dict holding a CUDA scalar to rank 0 with gather_object.
Unpickled CUDA tensors come back on the device they were pickled from (cuda:0 for rank 0's items, cuda:r for rank
r's metrics), in each receiving process.

EXPECTED: clean
MODELLED ON: evaluation harnesses that shard work from rank 0 (`dist.scatter_object_list(out, items if rank == 0
else None, src=0)`) and collect per-rank metrics with `dist.gather_object(metrics, gathered, dst=0)` without moving
tensors to the CPU first (torch docs warn about exactly this: "the object ... tensors will be restored on the
device they were saved on").
REASON: torch/distributed/distributed_c10d.py scatter_object_list / gather_object pickle each object into a byte
tensor on the current device (`_object_to_tensor`), move it with broadcast / gather, and unpickle it with
`_tensor_to_object`; torch.load of a CUDA storage without map_location restores it on its original device index.
"""
import os

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    items = None
    if rank == 0:
        items = [{"shard": r, "idx": torch.arange(4, device="cuda") + 10 * r} for r in range(world)]
    out = [None]
    dist.scatter_object_list(out, items, src=0)
    mine = out[0]
    assert mine["shard"] == rank
    assert mine["idx"].device == torch.device("cuda", 0)           # pickled on rank 0's cuda:0
    assert mine["idx"].tolist() == [10 * rank + k for k in range(4)]
    metrics = {"rank": rank, "loss": torch.tensor(0.5 * (rank + 1), device="cuda")}
    gathered = [None] * world if rank == 0 else None
    dist.gather_object(metrics, gathered, dst=0)
    if rank == 0:
        for r, m in enumerate(gathered):
            assert m["rank"] == r and m["loss"].device == torch.device("cuda", r)
            assert m["loss"].item() == 0.5 * (r + 1)
    else:
        assert gathered is None
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
