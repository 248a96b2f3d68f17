"""A final metrics all_reduce placed after `dist.destroy_process_group()` in a teardown path: the default group no
longer exists and c10d raises a ValueError.

EXPECTED: error
ERROR: ValueError
MODELLED ON: training scripts whose `finally:` block destroys the process group before an evaluation/cleanup hook
that still reduces a value (a common ordering bug in launcher wrappers).
REASON: torch/distributed/distributed_c10d.py `_get_default_group`: `if not is_initialized(): raise ValueError(
"Default process group has not been initialized, please make sure to call init_process_group.")`.
"""
import os

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    loss = torch.ones(1, device="cuda")
    dist.all_reduce(loss)
    dist.destroy_process_group()
    dist.all_reduce(loss)


if __name__ == "__main__":
    main()
