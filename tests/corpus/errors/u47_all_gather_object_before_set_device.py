"""A launcher prologue exchanges host metadata with all_gather_object right after init_process_group("nccl"), before
set_device: object collectives on an NCCL group stage the pickled bytes on the current device, cuda:0 on every
rank, so NCCL sees two ranks on one GPU and refuses the communicator.

EXPECTED: error
ERROR: DistBackendError
MODELLED ON: scripts that gather hostnames / free-port maps / config dicts with `dist.all_gather_object(out, info)`
during setup and select the GPU afterwards (the order torch docs warn about: "it is the user's responsibility to
ensure that this is set so that each rank has an individual GPU, via torch.cuda.set_device()").
REASON: torch/distributed/distributed_c10d.py all_gather_object: `current_device = _get_object_coll_device(group)`
("cuda" for an NCCL-only group: the current device), the size and data tensors go through all_gather on it;
ProcessGroupNCCL makes the communicator there and NCCL refuses duplicate GPUs (ncclInvalidUsage ->
DistBackendError). Unlike dist.barrier(), which picks global rank % device count when nothing is known.
"""
import os
import socket

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    info = {"rank": dist.get_rank(), "host": socket.gethostname(), "local_rank": int(os.environ["LOCAL_RANK"])}
    table = [None] * dist.get_world_size()
    dist.all_gather_object(table, info)            # every rank on cuda:0 here
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    print(table)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
