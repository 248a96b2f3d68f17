"""I10 DeepSpeed ZeRO-1/2 overlap_comm: the ping-pong gradient buffer's index was reset by `IPGBucket.clear()`, so
backward copied the next gradients into the buffer the reduction stream was still reducing.

EXPECTED: hazard
KINDS: write-after-read
KINDS_ALSO: write-after-write
INCIDENT: the reset came with https://github.com/deepspeedai/DeepSpeed/pull/6993 ("Enable torch.autocast with ZeRO",
2025, commit ed5f737: `IPGBucket.clear()` does `self.index = 0`); reported as issue 7188 (loss 0 from step 3) and
issue 7804; first worked around by https://github.com/deepspeedai/DeepSpeed/pull/7371 (commit f897b67: the current
stream and the reduction stream wait for each other after every bucket, which removes the overlap:
i10_deepspeed_pingpong_index_oversync_fix.py); fixed by https://github.com/deepspeedai/DeepSpeed/pull/7805 (commit
15ad92b: "`bucket.clear()` incorrectly resets the ping-pong buffer index to 0 at the end of `reduce_ipg_grads`. This
logic disrupts the buffer index swapping mechanism", the reset and #7371's sync removed:
i10_deepspeed_pingpong_index_fix.py).
MODELLED ON: deepspeed/runtime/zero/stage_1_and_2.py at ed5f737: `IPGBucket` (`buffer` = two
`reduce_bucket_size` tensors, `index`, `clear()`), `reduce_independent_p_g_buckets_and_remove_grads` (when the
bucket is full: `self.reduce_ipg_grads()`, then with contiguous_gradients and overlap_comm `bucket.index = 1 -
bucket.index`; then `bucket.buffer[bucket.index].narrow(0, bucket.elements, param.numel()).copy_(grad)` on the
current stream), `reduce_ipg_grads` (`average_tensor(bucket.buffer[bucket.index].narrow(0, 0, bucket.elements))`,
then under `with get_accelerator().stream(self.reduction_stream)`: `copy_grads_in_partition` per parameter, then
`bucket.clear()`), `average_tensor` (`stream.wait_stream(current_stream()); current_stream().wait_stream(stream)`,
then on the reduction stream `gradient_reduction_w_predivide`: `tensor.div_(dp_world_size)`, `dist.all_reduce`),
`independent_gradient_partition_epilogue` (`reduce_ipg_grads()`, `get_accelerator().synchronize()`).
SIMPLIFIED: six parameters of 2048 elements, `reduce_bucket_size` = two parameters, so three buckets; backward is
one kernel per gradient on the default stream; `reduce_scatter: false`; stage 2 partitioning as "rank r keeps the
gradients of the parameters with index % world == r".
RULE: `current_stream().wait_stream(reduction_stream)` in `average_tensor` orders later backward work only after
the reductions queued before it (torch/cuda/streams.py); the reduction it is about to queue is not covered, so the
next bucket must be the other buffer.
WHAT SIMDIST SAYS: write-after-read: the third bucket's gradient copy (default stream) writes buffer 1 while the
second bucket's reduction (reduction stream) still reads it; with the in-place div_/all_reduce also
write-after-write.
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
            bucket.index = 1 - bucket.index                 # swap between 0 and 1 (after the reset: always 1)
        bucket.buffer[bucket.index].narrow(0, bucket.elements, NUMEL).copy_(grad)
        bucket.params.append((i, bucket.elements))
        bucket.elements += NUMEL
    reduce_ipg_grads()                                      # independent_gradient_partition_epilogue
    torch.cuda.synchronize()

    sums = {i: round(g.sum().item(), 3) for i, g in sorted(grads_in_partition.items())}
    print(f"rank {rank}: reduced grads in partition {sums}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
