"""async all_reduce whose Work is never waited on; torch.cuda.synchronize() before using the output.

EXPECTED: clean
REASON: torch.cuda.synchronize() waits for every stream on the device, including ProcessGroupNCCL's internal stream (cudaDeviceSynchronize).
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    world = dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    x = torch.full((4096,), float(rank + 1), device="cuda")
    work = dist.all_reduce(x, async_op=True)
    torch.cuda.synchronize()
    y = x * 1
    assert y.min().item() == float(sum(range(1, world + 1)))
    work.wait()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
