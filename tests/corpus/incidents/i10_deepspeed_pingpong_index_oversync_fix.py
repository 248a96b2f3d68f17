"""I10 DeepSpeed ZeRO-1/2 overlap_comm with pull/7371's workaround: the index is still reset, but after every bucket
the current stream waits for the reduction stream. Correct, and no overlap left.

EXPECTED: clean
INCIDENT: https://github.com/deepspeedai/DeepSpeed/pull/7371 ("fix #7188", 2025, commit f897b67); pull/7805 later
called it out: "While the additional two-stream synchronization in that PR fixes gradient corruption, it effectively
disables the overlapping behavior"; same program as i10_deepspeed_pingpong_index_bug.py with the workaround added.
MODELLED ON: deepspeed/runtime/zero/stage_1_and_2.py at f897b67, `reduce_independent_p_g_buckets_and_remove_grads`:
after `self.reduce_ipg_grads()`, `self.reduction_stream.wait_stream(get_accelerator().current_stream())` and
`get_accelerator().current_stream().wait_stream(self.reduction_stream)`, then the index swap.
SIMPLIFIED: as in the buggy twin.
RULE: the second wait orders all later backward work after the reduction just queued (torch/cuda/streams.py), so
reusing the same buffer is safe; it also means backward cannot overlap with any reduction.
WHAT SIMDIST SAYS: clean: the workaround over-synchronizes (the wait covers the reduction queued just before), it
does not restore the missing edge's cause; the program checks the reduced gradients against the CPU.
"""
import os

import torch
import torch.distributed as dist

NUMEL = 2048
NPARAMS = 6
REDUCE_BUCKET_SIZE = 2 * NUMEL


class IPGBucket:
    def __init__(self):
        self.buffer = [torch.empty(REDUCE_BUCKET_SIZE, device="cuda") for _ in range(2)]
        self.index = 0
        self.elements = 0
        self.params = []

    def clear(self):
        self.params = []
        self.elements = 0
        self.index = 0              # BUG (pull/6993): resets the ping-pong index


def grad_of(i, rank):
    g = torch.Generator().manual_seed(i)
    return torch.randn(NUMEL, generator=g) * (rank + 1)


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    reduction_stream = torch.cuda.Stream()
    bucket = IPGBucket()
    grads_in_partition = {}

    def average_tensor(tensor):
        stream = reduction_stream
        stream.wait_stream(torch.cuda.current_stream())
        torch.cuda.current_stream().wait_stream(stream)
        with torch.cuda.stream(stream):
            tensor.div_(world)                              # gradient_reduction_w_predivide
            dist.all_reduce(tensor)

    def reduce_ipg_grads():
        average_tensor(bucket.buffer[bucket.index].narrow(0, 0, bucket.elements))
        with torch.cuda.stream(reduction_stream):
            for i, off in bucket.params:                    # copy_grads_in_partition
                if i % world == rank:
                    grads_in_partition[i] = bucket.buffer[bucket.index].narrow(0, off, NUMEL).clone()
        bucket.clear()

    for i in reversed(range(NPARAMS)):                      # backward: hooks in reverse order
        grad = grad_of(i, rank).cuda().mul_(0.5)            # the gradient kernel, default stream
        if bucket.elements + NUMEL > REDUCE_BUCKET_SIZE:    # reduce_independent_p_g_buckets_and_remove_grads
            reduce_ipg_grads()
            reduction_stream.wait_stream(torch.cuda.current_stream())   # pull/7371
            torch.cuda.current_stream().wait_stream(reduction_stream)   # pull/7371: backward waits for the reduction
            bucket.index = 1 - bucket.index                 # swap between 0 and 1 (after the reset: always 1)
        bucket.buffer[bucket.index].narrow(0, bucket.elements, NUMEL).copy_(grad)
        bucket.params.append((i, bucket.elements))
        bucket.elements += NUMEL
    reduce_ipg_grads()                                      # independent_gradient_partition_epilogue
    torch.cuda.synchronize()

    sums = {i: round(g.sum().item(), 3) for i, g in sorted(grads_in_partition.items())}
    print(f"rank {rank}: reduced grads in partition {sums}")
    for i, g in grads_in_partition.items():                 # reference: averaged gradients on the CPU
        ref = sum(grad_of(i, r) * 0.5 for r in range(world)) / world
        assert torch.allclose(g.cpu(), ref, atol=1e-5), f"grad {i} wrong"
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
