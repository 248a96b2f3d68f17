"""`cm.wait()` of an async `_coalescing_manager` block called under a side-stream context: the wait orders that side
stream after the coalesced all-reduces, not the default stream, which then reads the reduced buckets with no
ordering against the NCCL stream.

EXPECTED: hazard
KINDS: read-after-write
KINDS_ALSO: write-after-read
MODELLED ON: Megatron's overlapped gradient sync with a separate communication stream
(param_and_grad_buffer.py: `stream_context = torch.cuda.stream(self.communication_stream)` around the coalescing
block, and `finish_grad_sync` calling `self.grad_reduce_handle.wait()`), here with the wait moved inside the
communication-stream context and the default stream's `wait_stream(communication_stream)` forgotten.
REASON: Work.wait() blocks the CURRENT stream on the work's end event (torch.distributed docs, "Synchronous and
asynchronous collective operations": "wait() ... will block the current stream"; ProcessGroupNCCL WorkNCCL::
synchronizeStream: `ncclEndEvent_->block(at::cuda::getCurrentCUDAStream(...))`); `_CoalescingManager.wait()` waits
each work.
"""
import os

import torch
import torch.distributed as dist
from torch.distributed import _coalescing_manager


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    comm_stream = torch.cuda.Stream()
    buckets = [torch.full((1 << 14,), float(rank + b), device="cuda") for b in range(2)]
    with _coalescing_manager(async_ops=True) as cm:
        for g in buckets:
            dist.all_reduce(g, async_op=True)
    with torch.cuda.stream(comm_stream):
        cm.wait()                                   # orders comm_stream, not the default stream
    # BUG: torch.cuda.current_stream().wait_stream(comm_stream) missing
    total = sum(g.sum() for g in buckets)
    print(f"rank {rank}: total {total.item()}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
