"""I7 PyTorch DDP (2019): gradient buckets flattened on a worker stream, all-reduced on ProcessGroupNCCL's stream,
with no record_stream of the flattened tensor on that stream. In DDP's own flow the missing record_stream is not
reachable: this "buggy" program is clean.

EXPECTED: clean
NCCL: 2.8
INCIDENT: https://github.com/pytorch/pytorch/pull/18465 ("Fix NCCL/Gloo process groups and DDP stream sync bug",
2019): "DDP with NCCL backend uses a worker stream to flatten grad batch tensors, and passes the flattened tensor to
another stream to conduct ncclAllReduce. The flattened tensor has to record the ncclAllReduce stream, otherwise
multiple streams might access the same memory space." The fix adds, in ProcessGroupNCCL::allreduce,
`c10::cuda::CUDACachingAllocator::recordStream(tensors[i].storage().data(), ncclStream)` ("Input `tensors` are
created on a worker stream and used in a different ncclStream. Hence, `tensors` must record the ncclStream to
prevent being freed before ncclAllReduce finishes."); twin: i07_torch_ddp_flat_bucket_fix.py.
MODELLED ON: torch/csrc/distributed/c10d/ddp.cpp (2019) `queueReduction` (an event recorded on the current stream;
a worker stream from the pool (`at::cuda::createCUDAStream`) blocks on it; under a CUDAGuard on the worker stream:
`flatten_dense_tensors(gradsBatch)`, `gradsBatchCoalesced[0] /= processGroup.getSize()`,
`processGroup.allreduce({gradsBatchCoalesced[0]})`; returns the work and the flattened tensor) and `syncReduction`
(another pooled worker stream; `reductionWork->wait()`; `unflatten_dense_tensors` + `copy_` into the gradients; an
event recorded on the worker stream blocks the backward stream); torch/nn/parallel/distributed.py (2019)
`_queue_reduction` (`self.buckets_coalesced[bucket_idx] = result[1]`) and `_sync_reduction_works` (syncs every bucket,
then `self.buckets_coalesced = [[] ...]` frees the flattened tensors); torch/lib/c10d/ProcessGroupNCCL.cpp (2019)
`allreduce` (`syncStreams`: the pooled ncclStream waits on an event recorded on the current stream; ncclAllReduce on
ncclStream; WorkNCCL keeps an end event that `wait()` makes the current stream block on).
SIMPLIFIED: the 2019 ncclStream is an explicit stream with the collective launched while it is current (NCCL profile
2.8 runs a synchronous collective on the current stream, which is exactly ncclAllReduce(..., ncclStream); under
profile 2.7 simdist would add its own internal stream and record_stream, i.e. the fixed PyTorch); the stream pool
has four streams (CUDA's has 32 per priority); one device per process, two buckets, two iterations of SGD.
RULE: the caching allocator hands a freed block only to later allocations on the stream it was allocated on
(c10/cuda/CUDACachingAllocator.cpp; "CUDA semantics: memory management"); a block used on another stream needs
record_stream only if such a later allocation can run before that other stream is done with it.
WHAT SIMDIST SAYS: clean. The flattened tensors are freed in `_sync_reduction_works` after the backward stream has
waited on every reduction (through syncReduction's event), and the next allocation on a worker stream is made after
that worker stream blocks on an event recorded on the backward stream (queueReduction), so it is ordered after the
all-reduce. "Freed before ncclAllReduce finishes" is true in host time but harmless in stream order. The PR's
record_stream protects callers that can allocate on the worker stream without that ordering: tests/test_incidents.py
removes queueReduction's wait on the backward stream from both twins and gets a reuse-after-free of the all-reduce's
block in this one, none in the fixed one. The PR names no failing run; if there was one, it came through a path
other than DDP's queue/sync flow.
"""
import os

import torch
import torch.distributed as dist

BUCKET_SIZES = [(256, 128), (512,)]      # parameter shapes per bucket, one parameter each
LR = 0.1
_pool = [None] * 4
_pool_next = [0]


def create_cuda_stream():
    """at::cuda::createCUDAStream(): round-robin over a pool of streams (four here)."""
    i = _pool_next[0] % len(_pool)
    _pool_next[0] += 1
    if _pool[i] is None:
        _pool[i] = torch.cuda.Stream()
    return _pool[i]


class ProcessGroupNCCL2019:
    def __init__(self):
        self.nccl_stream = torch.cuda.Stream()           # ncclStreams_[key]

    def allreduce(self, tensors):
        ev = torch.cuda.Event()                           # syncStreams: ncclEvents_[key] on the current stream
        ev.record()
        self.nccl_stream.wait_event(ev)
        with torch.cuda.stream(self.nccl_stream):
            for t in tensors:
                dist.all_reduce(t)                        # ncclAllReduce(..., ncclStream)
        # BUG (before pull/18465): no recordStream(tensor, ncclStream)
        work = torch.cuda.Event()                         # WorkNCCL::cudaEvents_
        work.record(self.nccl_stream)
        return work


def queue_reduction(pg, grads_batch, world):
    event = torch.cuda.Event()
    event.record()                                        # events[devIdx].record() on the current stream
    worker = create_cuda_stream()
    worker.wait_event(event)                              # events[devIdx].block(workerStreams.back())
    with torch.cuda.stream(worker):
        flat = torch.cat([g.reshape(-1) for g in grads_batch])   # flatten_dense_tensors
        flat /= world
        work = pg.allreduce([flat])
    return work, flat


def sync_reduction(work, grads_batch, flat):
    worker = create_cuda_stream()
    with torch.cuda.stream(worker):
        worker.wait_event(work)                           # reductionWork->wait()
        offset = 0
        for g in grads_batch:                             # unflatten_dense_tensors + copy_
            g.copy_(flat[offset:offset + g.numel()].view_as(g))
            offset += g.numel()
        event = torch.cuda.Event()
        event.record(worker)
    torch.cuda.current_stream().wait_event(event)        # event.block(bwStream)


def grad_of(b, rank, step):
    g = torch.Generator().manual_seed(10 * b + step)
    return torch.randn(*BUCKET_SIZES[b], generator=g) * (rank + 1)


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    pg = ProcessGroupNCCL2019()
    params = [torch.zeros(*s, device="cuda") for s in BUCKET_SIZES]
    for step in range(2):
        grads = [grad_of(b, rank, step).cuda(non_blocking=True) for b in range(len(params))]   # backward (default stream, no host sync)
        reduction_works = [None] * len(params)
        buckets_coalesced = [None] * len(params)
        for b in reversed(range(len(params))):            # distributed_data_parallel_hook -> _queue_reduction
            reduction_works[b], buckets_coalesced[b] = queue_reduction(pg, [grads[b]], world)
        for b in range(len(params)):                      # _sync_reduction_works
            sync_reduction(reduction_works[b], [grads[b]], buckets_coalesced[b])
        buckets_coalesced = [[] for _ in params]          # frees the flattened tensors
        for p, g in zip(params, grads):                   # optimizer.step()
            p.sub_(g, alpha=LR)
    sums = [round(p.sum().item(), 4) for p in params]
    print(f"rank {rank}: parameters after 2 steps {sums}")
    for b, p in enumerate(params):                        # reference: averaged gradients, on the CPU
        ref = -LR * sum(sum(grad_of(b, r, s) for r in range(world)) / world for s in range(2))
        assert torch.allclose(p.cpu(), ref, atol=1e-5), f"bucket {b} wrong"
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
