"""I2 DeepSpeed ZeRO-1/2 overlap_comm: the reduction stream waited only for the current stream, but the gradient
bucket was filled from several streams.

EXPECTED: hazard
KINDS: read-after-write
KINDS_ALSO: write-after-write
NCCL: 2.8
INCIDENT: https://github.com/deepspeedai/DeepSpeed/issues/8061 (2026, "ZeRO stage 1/2 overlap_comm only waits current
stream, but contiguous gradient bucket copies may come from multiple streams"; NaN loss from step 1 under
torch.compile), fixed by https://github.com/deepspeedai/DeepSpeed/pull/8080 (commit 711bd11).
MODELLED ON: deepspeed/runtime/zero/stage_1_and_2.py at 711bd11^: `reduce_independent_p_g_buckets_and_remove_grads`
(`new_grad_tensor = bucket.buffer[bucket.index].narrow(0, bucket.elements, param.numel())`,
`new_grad_tensor.copy_(grad_reduc.view(-1))`, run by each parameter's gradient hook on whatever stream autograd ran
it), `reduce_ipg_grads` -> `average_tensor` (with overlap_comm: `stream = self.reduction_stream;
stream.wait_stream(get_accelerator().current_stream()); get_accelerator().current_stream().wait_stream(stream)`,
then under `with get_accelerator().stream(stream)`: `gradient_reduction_w_predivide` = `tensor.div_(dp_world_size)`
+ `dist.all_reduce(tensor)`), then `copy_grads_in_partition` on the reduction stream, and
`independent_gradient_partition_epilogue` (`get_accelerator().synchronize()` with overlap_comm).
SIMPLIFIED: compiled autograd's per-hook streams are two explicit streams (`autograd_streams`), each computing its
parameters' gradients and running their hooks; three parameters, one fp32 IPG bucket; `reduce_scatter: false`
(the `gradient_reduction_w_predivide` path; with the default reduce-scatter path the same `tensor.div_` on the
reduction stream is the first read of the bucket, so the race is the same); stage 2's partitioning is kept to
"rank r keeps the gradients of the parameters of partition r".
RULE: `Stream.wait_stream(s)` orders later work only after work already queued on `s` (torch/cuda/streams.py:
it records an event on `s` and waits on it); work on a third stream is not covered.
WHAT SIMDIST SAYS: read-after-write between the bucket copy_ on an autograd stream and `tensor.div_` on the
reduction stream (and write-after-write with the in-place div_).
"""
import os

import torch
import torch.distributed as dist

SIZES = [3000, 5000, 4000]          # numel of the three parameters
REDUCE_BUCKET_SIZE = 16384          # elements; all three fit in one bucket
PARTITION = [0, 0, 1]               # which DP rank owns each parameter's gradient partition


class IPGBucket:                    # stage_1_and_2.py IPGBucket (before pull/8080: no copy_streams)
    def __init__(self, dtype):
        self.buffer = [torch.empty(REDUCE_BUCKET_SIZE, dtype=dtype, device="cuda") for _ in range(2)]
        self.index = 0
        self.elements = 0
        self.params = []


def grad_of(i, rank):
    g = torch.Generator().manual_seed(100 + i)
    return torch.randn(SIZES[i], generator=g).cuda().mul_(rank + 1)


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    reduction_stream = torch.cuda.Stream()                       # self.reduction_stream
    autograd_streams = [torch.cuda.Stream(), torch.cuda.Stream()]  # compiled backward: hooks on several streams
    bucket = IPGBucket(torch.float32)
    grads_in_partition = {}

    # backward: each parameter's gradient is produced, and its hook run, on an autograd stream
    for s in autograd_streams:
        s.wait_stream(torch.cuda.current_stream())               # the forward pass ran on the default stream
    for i in (2, 1, 0):                                          # reverse order, as backward visits them
        with torch.cuda.stream(autograd_streams[i % 2]):
            grad_reduc = grad_of(i, rank).mul_(0.5)
            # reduce_independent_p_g_buckets_and_remove_grads(param, i), contiguous_gradients=True
            new_grad_tensor = bucket.buffer[bucket.index].narrow(0, bucket.elements, SIZES[i])
            new_grad_tensor.copy_(grad_reduc.view(-1))
            bucket.params.append((i, bucket.elements))
            bucket.elements += SIZES[i]

    # independent_gradient_partition_epilogue -> reduce_ipg_grads -> average_tensor, on the default stream
    tensor = bucket.buffer[bucket.index].narrow(0, 0, bucket.elements)
    stream = reduction_stream
    stream.wait_stream(torch.cuda.current_stream())              # BUG: waits only for the current stream
    torch.cuda.current_stream().wait_stream(stream)
    with torch.cuda.stream(stream):
        tensor.div_(world)                                       # gradient_reduction_w_predivide
        dist.all_reduce(tensor)
        for i, off in bucket.params:                             # copy_grads_in_partition
            if PARTITION[i] == rank:
                grads_in_partition[i] = tensor.narrow(0, off, SIZES[i]).clone()
    torch.cuda.synchronize()                                     # epilogue: get_accelerator().synchronize()

    sums = {i: round(g.sum().item(), 3) for i, g in sorted(grads_in_partition.items())}
    print(f"rank {rank}: reduced grads in partition {sums}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
