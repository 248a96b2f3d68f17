"""dist.monitored_barrier() on an NCCL-only default group: c10d refuses it (it is a gloo feature), so the debug
barrier a script adds to find a straggler raises instead.

EXPECTED: error
ERROR: ValueError
MODELLED ON: the debugging recipe of torch's docs (TORCH_DISTRIBUTED_DEBUG / `dist.monitored_barrier(timeout=...)`
to report which rank did not arrive) dropped into an NCCL training script.
REASON: torch/distributed/distributed_c10d.py monitored_barrier: `if get_backend(group) != Backend.GLOO: raise
ValueError("monitored_barrier is only implemented for GLOO backend.")`.
"""
import os
from datetime import timedelta

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    x = torch.ones(8, device="cuda")
    dist.all_reduce(x)
    dist.monitored_barrier(timeout=timedelta(seconds=30))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
