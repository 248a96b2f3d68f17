"""I2 DeepSpeed ZeRO-1/2 overlap_comm, fixed as in pull/8080: record every stream that copied into the bucket, and
make the reduction stream wait for all of them.

EXPECTED: clean
NCCL: 2.8
INCIDENT: https://github.com/deepspeedai/DeepSpeed/issues/8061, fix https://github.com/deepspeedai/DeepSpeed/pull/8080
(commit 711bd11); twin of i02_deepspeed_ipg_bucket_streams_bug.py (same program, the fix added).
MODELLED ON: deepspeed/runtime/zero/stage_1_and_2.py at 711bd11: `IPGBucket.copy_streams` (a set, cleared in
`clear()`), `bucket.copy_streams.add(get_accelerator().current_stream())` after each copy into
`bucket.buffer[bucket.index]`, and in `average_tensor`: `producer_streams = bucket.copy_streams or
{get_accelerator().current_stream()}; for producer_stream in producer_streams: stream.wait_stream(producer_stream)`.
SIMPLIFIED: as in the buggy twin.
RULE: the reduction stream's wait on each producer stream orders every copy into the bucket before the reduction
(torch/cuda/streams.py `wait_stream`).
WHAT SIMDIST SAYS: clean; the program checks the reduced gradients of its partition against a CPU reference.
"""
import os

import torch
import torch.distributed as dist

SIZES = [3000, 5000, 4000]          # numel of the three parameters
REDUCE_BUCKET_SIZE = 16384          # elements; all three fit in one bucket
PARTITION = [0, 0, 1]               # which DP rank owns each parameter's gradient partition


class IPGBucket:                    # stage_1_and_2.py IPGBucket, with pull/8080's copy_streams
    def __init__(self, dtype):
        self.buffer = [torch.empty(REDUCE_BUCKET_SIZE, dtype=dtype, device="cuda") for _ in range(2)]
        self.index = 0
        self.elements = 0
        self.params = []
        self.copy_streams = set()    # streams that issued copies into buffer[index] for this fill


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
            bucket.copy_streams.add(torch.cuda.current_stream())   # FIX (pull/8080)
            bucket.params.append((i, bucket.elements))
            bucket.elements += SIZES[i]

    # independent_gradient_partition_epilogue -> reduce_ipg_grads -> average_tensor, on the default stream
    tensor = bucket.buffer[bucket.index].narrow(0, 0, bucket.elements)
    stream = reduction_stream
    producer_streams = bucket.copy_streams or {torch.cuda.current_stream()}
    for producer_stream in producer_streams:                     # FIX (pull/8080): wait for every producer
        stream.wait_stream(producer_stream)
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
    for i, g in grads_in_partition.items():                      # reference: the same reduction on the CPU
        ref = sum(torch.randn(SIZES[i], generator=torch.Generator().manual_seed(100 + i)) * (r + 1) * 0.5 / world
                  for r in range(world))
        assert torch.allclose(g.cpu(), ref, atol=1e-5), f"grad {i} wrong"
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
