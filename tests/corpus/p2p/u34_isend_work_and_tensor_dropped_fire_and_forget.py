"""Fire-and-forget sends: rank 0 isends activations and drops both the Work and the tensor at once, then allocates
and writes new tensors of the same size; the send still reads the right bytes, because ProcessGroupNCCL keeps an
in-flight P2P's tensor (torch >= 2.8: stashed in the Work the watchdog holds until completion; earlier:
record_stream on the P2P stream), so the freed block is not reused before the send has read it.

EXPECTED: clean
MODELLED ON: pipeline-parallel schedules that `dist.isend(output_tensor, next_rank)` and only keep the handle for a
later wait in some code paths (torch/distributed/pipelining/schedules.py `_sorted_batch_p2p` callers, Megatron
p2p_communication with `wait_on_reqs=False`), freeing the activation after the send is posted.
REASON: ProcessGroupNCCL pointToPoint: the tensor is stashed for allocator safety (TensorShelf) and the watchdog keeps
the work until its end event completes (workMetaList_); with TORCH_NCCL_AVOID_RECORD_STREAMS=0 on older versions the
tensor is record_stream-ed on the NCCL stream (CUDACachingAllocator recordStream). The receiver waits its recv.
"""
import os

import torch
import torch.distributed as dist

N = 1 << 15


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    if rank == 0:
        for mb in range(3):
            act = torch.full((N,), float(mb + 1), device="cuda")
            dist.isend(act, 1)                       # Work dropped
            del act                                  # tensor dropped: its block must not be reused yet
            scratch = torch.full((N,), -1.0, device="cuda")
            del scratch
        torch.cuda.synchronize()
    else:
        for mb in range(3):
            buf = torch.empty(N, device="cuda")
            dist.recv(buf, 0)
            assert torch.equal(buf.cpu(), torch.full((N,), float(mb + 1))), (mb, buf[:3])
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
