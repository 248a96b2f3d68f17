"""The working form of u26: a gloo group made next to the NCCL world for host-side coordination; monitored_barrier
(wait_all_ranks=True) runs on it, NCCL collectives on the default group before and after.

EXPECTED: clean
MODELLED ON: torchelastic / torchtitan-style scripts that create `dist.new_group(backend="gloo")` for CPU-side
barriers and object exchange while training on NCCL (torch docs, monitored_barrier: "only implemented for GLOO").
REASON: torch/distributed/distributed_c10d.py monitored_barrier on a gloo group: every rank must arrive before the
timeout; it synchronizes hosts only, nothing on the device. Values: plain sums.
"""
import os
from datetime import timedelta

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    host_group = dist.new_group(backend="gloo")
    x = torch.full((8,), float(rank), device="cuda")
    dist.all_reduce(x)
    dist.monitored_barrier(group=host_group, timeout=timedelta(seconds=30), wait_all_ranks=True)
    flags = torch.tensor([rank + 1])
    dist.all_reduce(flags, group=host_group)
    assert flags.item() == sum(range(1, world + 1))
    assert torch.equal(x.cpu(), torch.full((8,), float(sum(range(world)))))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
