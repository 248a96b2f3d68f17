"""init_process_group("nccl") then all_reduce of a CPU tensor.

EXPECTED: error
ERROR: RuntimeError
REASON: an NCCL-only process group has no backend for device type cpu (torch: "No backend type associated with device type cpu").
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    x = torch.ones(4)
    dist.all_reduce(x)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
