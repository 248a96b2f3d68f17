"""non_blocking D2H copy into pinned memory on the default stream, then dist.barrier(device_ids=[local_rank]), then the host reads the pinned buffer.

EXPECTED: clean
REASON: WorkNCCL::synchronize for a barrier work (barrierTensor_ defined) calls currentStream.synchronize(): after dist.barrier() returns, all work queued earlier on the current stream has finished.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    lr = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(lr)
    x = torch.full((4096,), float(rank + 5), device="cuda")
    x.mul_(2.0)
    host = torch.empty(4096, pin_memory=True)
    host.copy_(x, non_blocking=True)
    dist.barrier(device_ids=[lr])
    assert torch.all(host == 2.0 * (rank + 5)).item(), host[0].item()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
