"""I7 PyTorch DDP (2019), with pull/18465's fix: ProcessGroupNCCL::allreduce records the NCCL stream on its inputs.

EXPECTED: clean
NCCL: 2.8
INCIDENT: https://github.com/pytorch/pytorch/pull/18465 ("Fix NCCL/Gloo process groups and DDP stream sync bug",
2019); twin of i07_torch_ddp_flat_bucket_bug.py (same program, the fix added).
MODELLED ON: torch/lib/c10d/ProcessGroupNCCL.cpp after pull/18465, `allreduce`: "Input `tensors` are created on a
worker stream and used in a different ncclStream. Hence, `tensors` must record the ncclStream to prevent being freed
before ncclAllReduce finishes." -> `CUDACachingAllocator::recordStream(..., ncclStream)`. DDP itself unchanged.
SIMPLIFIED: as in the buggy twin.
RULE: `Tensor.record_stream(s)`: the block is not reused until the work queued on `s` at the time of the free is done
(torch.Tensor.record_stream docs; c10/cuda/CUDACachingAllocator.cpp `recordStream`).
WHAT SIMDIST SAYS: clean, like the buggy twin (see its docstring for why the DDP flow was already ordered).
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
        for t in tensors:                                 # FIX (pull/18465): recordStream(tensor, ncclStream)
            t.record_stream(self.nccl_stream)
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
