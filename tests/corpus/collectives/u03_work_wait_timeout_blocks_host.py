"""An async all_reduce waited with `work.wait(timeout=...)`: the host blocks until the collective is done, so
`work.is_completed()` right after is True, and the result is read on the current stream after the wait.

EXPECTED: clean
MODELLED ON: torchft-style fault-tolerant training loops that bound each collective with a per-call timeout
(`work.wait(timeout=timedelta(seconds=...))`) and then check the work's state before committing the step.
REASON: torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp WorkNCCL::wait: synchronize() makes the current stream wait,
then "In case of blockingWait or a timeout value is specified by the user, we block the CPU thread until the work
is completed or timed out" (`if (blockingWait_ || timeout != kNoTimeout) { while (!isCompleted()) ... }`).
"""
import os
from datetime import timedelta

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    grads = [torch.full((1 << 14,), float(rank + i), device="cuda") for i in range(3)]
    works = [dist.all_reduce(g, async_op=True) for g in grads]
    for w in works:
        w.wait(timeout=timedelta(seconds=120))
        assert w.is_completed(), "wait(timeout) returned before the collective completed"
    for i, g in enumerate(grads):
        want = float(sum(r + i for r in range(world)))
        assert torch.equal(g.cpu(), torch.full((1 << 14,), want)), (i, g[:3])
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
