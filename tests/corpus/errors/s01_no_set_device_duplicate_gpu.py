"""A torchrun script that never calls torch.cuda.set_device: every process's current device is cuda:0, so both
ranks' all_reduce runs on GPU 0 and NCCL refuses the communicator.

EXPECTED: error
ERROR: DistBackendError
REASON: a torchrun process starts on device 0 (CUDA's default); ProcessGroupNCCL makes the communicator on the
tensor's device, and NCCL's init finds two ranks with the same GPU ("Duplicate GPU detected", ncclInvalidUsage),
which torch raises as torch.distributed.DistBackendError. Silently giving each rank a GPU of its own would hide the
missing set_device (NCCL docs, "ncclInvalidUsage"; torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp getNCCLComm).
"""
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    x = torch.ones(1024, device="cuda")  # cuda:0 on every rank
    dist.all_reduce(x)
    torch.cuda.synchronize()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
