"""An async all_reduce of a CPU tensor on gloo (the "cpu:gloo" half of a "cpu:gloo,cuda:nccl" group), then the
tensor is scaled in place before `work.wait()`: ProcessGroupGloo's worker thread reads the input and writes the
result some time before wait() returns, so the host's mul_ races it (the sum may include the scaled value, or the
scaled sum may be overwritten by the unscaled one). Waiting before the mul_ is the fix.

EXPECTED: hazard
KINDS: write-after-read
KINDS_ALSO: host-read
WORLD_SIZE: 2
MODELLED ON: metric / loss-scale bookkeeping on CPU tensors overlapped with an async gloo all_reduce.
RULE: https://pytorch.org/docs/stable/distributed.html (synchronous and asynchronous collective operations:
async_op=True returns a work handle; "wait() ... in the case of CPU collectives, will block the process until the
operation is completed"); torch/csrc/distributed/c10d/ProcessGroupGloo.cpp: the work is enqueued for a worker thread
(ProcessGroupGloo::enqueue, runLoop).
WHAT SIMDIST SAYS: write-after-read and host-read between the gloo all_reduce and the mul_ (before c05 nothing: the
gloo collective completed inside the call).
"""
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("cpu:gloo,cuda:nccl")
    rank = dist.get_rank()
    stats = torch.full((256,), float(rank + 1))
    work = dist.all_reduce(stats, async_op=True)
    stats.mul_(0.5)                  # BUG: the worker may not have read (or written) stats yet
    work.wait()
    print(stats[0].item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
