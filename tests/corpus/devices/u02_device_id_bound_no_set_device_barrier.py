"""init_process_group(device_id=cuda:LOCAL_RANK) and no set_device: the current device stays cuda:0, tensors are made
on the bound device explicitly, and dist.barrier() runs on the bound device, so the script works on GPUs.

EXPECTED: clean
MODELLED ON: torch's recommended eager init (`init_process_group(..., device_id=torch.device(f"cuda:{local_rank}"))`,
torch/distributed/distributed_c10d.py init_process_group docstring) in a script that places tensors with explicit
devices (`device=f"cuda:{local_rank}"`) and never changes the current device.
REASON: init_process_group binds the group (pg.bound_device_id) but does not call set_device
(distributed_c10d.py init_process_group / _new_process_group_helper); distributed_c10d.barrier passes
`opts.device = group.bound_device_id` and ProcessGroupNCCL::barrier's 2nd choice is `getBoundDeviceId()`
(ProcessGroupNCCL.cpp "2nd choice: Use the bound GPU device id if available").
"""
import os

import torch
import torch.distributed as dist


def main():
    lr = int(os.environ["LOCAL_RANK"])
    dev = torch.device("cuda", lr)
    dist.init_process_group("nccl", device_id=dev)
    rank, world = dist.get_rank(), dist.get_world_size()
    assert torch.cuda.current_device() == 0
    x = torch.arange(8, dtype=torch.float32, device=dev) * (rank + 1)
    dist.all_reduce(x)
    dist.barrier()
    want = torch.arange(8, dtype=torch.float32) * sum(range(1, world + 1))
    assert torch.equal(x.cpu(), want), x
    g = [torch.empty(2, device=dev) for _ in range(world)]
    dist.all_gather(g, torch.full((2,), float(rank), device=dev))
    assert [t.cpu().tolist() for t in g] == [[float(r)] * 2 for r in range(world)]
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
