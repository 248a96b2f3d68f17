"""The fix of u20 without set_device: every tensor is made on the bound device (`device=dev` with
`dev = torch.device("cuda", LOCAL_RANK)`), including in a subgroup made after init (it inherits the bound
device), so every collective runs; the current device stays cuda:0 throughout.

EXPECTED: clean
MODELLED ON: libraries that thread an explicit `device` through instead of relying on the current device
(torchtitan's `device = torch.device(f"{device_type}:{local_rank}")` passed to every allocation), with torch's
recommended eager init.
REASON: ProcessGroupNCCL accepts tensors on the bound device (getNCCLComm's bound_device_id_ check);
distributed_c10d._new_group_with_tag gives a new group the default group's bound_device_id. Values: plain sums.
"""
import os

import torch
import torch.distributed as dist


def main():
    lr = int(os.environ["LOCAL_RANK"])
    dev = torch.device("cuda", lr)
    dist.init_process_group("nccl", device_id=dev)
    rank, world = dist.get_rank(), dist.get_world_size()
    sub = dist.new_group(list(range(world)))
    assert sub.bound_device_id == dev
    loss = torch.tensor([1.5 * (rank + 1)], device=dev)
    dist.all_reduce(loss)
    assert loss.item() == 1.5 * sum(range(1, world + 1))
    grads = torch.full((256,), float(rank), device=dev)
    dist.all_reduce(grads, op=dist.ReduceOp.MAX, group=sub)
    assert torch.equal(grads.cpu(), torch.full((256,), float(world - 1)))
    assert torch.cuda.current_device() == 0
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
