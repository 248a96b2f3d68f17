"""all_gather_into_tensor into a non-contiguous column view of a 2-D buffer.

EXPECTED: error
ERROR: ValueError
REASON: ProcessGroupNCCL's check_gpu_single_tensor rejects non-contiguous collective tensors with ValueError("Tensors must be contiguous").
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    world = dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    buf = torch.zeros(world * 16, 2, device="cuda")
    dist.all_gather_into_tensor(buf[:, 1], torch.ones(16, device="cuda"))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
