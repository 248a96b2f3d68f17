"""I10 DeepSpeed ZeRO-1/2 overlap_comm, fixed as in pull/7805: `IPGBucket.clear()` no longer resets the ping-pong
index, so backward always fills the buffer that is not being reduced.

EXPECTED: clean
INCIDENT: https://github.com/deepspeedai/DeepSpeed/pull/7805 (commit 15ad92b; issues 7188, 7804); twin of
i10_deepspeed_pingpong_index_bug.py (same program, the fix applied).
MODELLED ON: deepspeed/runtime/zero/stage_1_and_2.py at 15ad92b: `self.index = 0` removed from `IPGBucket.clear()`,
and pull/7371's extra `reduction_stream.wait_stream(current_stream())` / `current_stream().wait_stream(
reduction_stream)` after `reduce_ipg_grads()` removed again.
SIMPLIFIED: as in the buggy twin.
RULE: with alternating buffers, the wait `average_tensor` makes the current stream do before reduction k covers
reduction k - 1, the last user of the buffer backward fills next (torch/cuda/streams.py `wait_stream`).
WHAT SIMDIST SAYS: clean, with the overlap kept; the program checks the reduced gradients against the CPU.
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
        # FIX (pull/7805): the index is not reset here, so the buckets keep alternating


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
            bucket.index = 1 - bucket.index                 # swap between 0 and 1
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
