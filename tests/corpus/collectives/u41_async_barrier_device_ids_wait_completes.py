"""`dist.barrier(async_op=True, device_ids=[local_rank])`: the work's wait() blocks the host until the barrier's
all-reduce has completed (ProcessGroupNCCL barrier works are host-blocking), so is_completed() is True after it,
and the device work issued before the barrier on the current stream is done too.

EXPECTED: clean
MODELLED ON: overlapping host work with a barrier (`work = dist.barrier(async_op=True, device_ids=[local_rank]);
... host-side preparation ...; work.wait()`), as checkpoint savers do before rank 0 finalizes the files.
REASON: distributed_c10d.barrier passes device_ids (ProcessGroupNCCL::barrier's 1st choice of device); the barrier
is an all_reduce of one element on that device's current stream, and WorkNCCL::wait for a barrier op synchronizes
the host with it ("ProcessGroupNCCL now blocks the cpu thread till the completion of the barrier collective",
distributed_c10d.barrier note). Values: a pinned D2H copy queued before the barrier, read on the host after it.
"""
import os

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    lr = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(lr)
    state = torch.full((1 << 14,), float(rank + 7), device="cuda")
    host = torch.empty(1 << 14, pin_memory=True)
    host.copy_(state, non_blocking=True)              # queued on the current stream before the barrier
    work = dist.barrier(async_op=True, device_ids=[lr])
    work.wait()
    assert work.is_completed()
    assert torch.equal(host, torch.full((1 << 14,), float(rank + 7)))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
