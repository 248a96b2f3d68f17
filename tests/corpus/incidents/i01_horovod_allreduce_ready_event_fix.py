"""I1 Horovod, fixed as in pull/363: a ready event recorded on the caller's stream at enqueue, polled before the copies.

EXPECTED: clean
NCCL: 2.8
INCIDENT: https://github.com/horovod/horovod/pull/363 ("Critical Bugfix: PyTorch must wait for GPU data before
allreduce", 2018); twin of i01_horovod_allreduce_ready_event_bug.py (same program, the fix added).
MODELLED ON: horovod/torch/ready_event.cc `TorchReadyEvent` (the constructor does `cudaEventRecord(cuda_event_,
THCState_getCurrentStreamOnDevice(state, device_))`; `Ready()` is `cudaEventQuery`) and horovod/common/operations.cc
`PerformOperation`, whose WAIT_FOR_DATA loop polls every entry's `ready_event->Ready()` (sleeping 100 ns between
polls) before MEMCPY_IN_FUSION_BUFFER. Later Horovod (pull/2963) replaced the host poll by cudaStreamWaitEvent.
SIMPLIFIED: as in the buggy twin (background thread's steps on the rank's host thread; torch's NCCL; toy backward).
RULE: once the host has seen an event complete (cudaEventQuery == cudaSuccess), everything it launches afterwards on
any stream starts after the work the event captured (CUDA Runtime API, cudaEventQuery / cudaEventRecord).
WHAT SIMDIST SAYS: clean; the program checks the averaged gradients against a CPU reference.
"""
import os

import torch
import torch.distributed as dist

N = 64 * 1024          # elements per gradient
FUSION_ELEMS = 4 * N   # HOROVOD_FUSION_THRESHOLD, in elements


def backward(rank):
    """Two gradients written by kernels on the current (default) stream, as autograd would."""
    g = torch.Generator().manual_seed(1234)
    grads = []
    for i in range(2):
        x = torch.randn(N, generator=g).cuda()
        grads.append(((x * (rank + 1)).add_(i)).mul_(0.5))   # last kernel writes grad i
    return grads


def reference_grads(rank):
    g = torch.Generator().manual_seed(1234)
    return [((torch.randn(N, generator=g) * (rank + 1)).add_(i)).mul_(0.5) for i in range(2)]


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    # horovod_global.streams[device] (operations.cc): a non-blocking stream of the greatest priority
    hvd_stream = torch.cuda.Stream(priority=-1)
    fusion_buffer = torch.empty(FUSION_ELEMS, device="cuda")   # FusionBufferManager: kept for the whole run

    grads = backward(rank)

    # hvd.allreduce_async_(grad, name=...) for each grad: the entry goes into horovod_global.tensor_table with
    # a TorchReadyEvent recorded on the caller's current stream (FIX, pull/363).
    tensor_table = []
    for i, g in enumerate(grads):
        ready_event = torch.cuda.Event()
        ready_event.record(torch.cuda.current_stream())
        tensor_table.append((f"grad.{i}", g, ready_event))

    # PerformOperation, WAIT_FOR_DATA: poll every entry's ready_event->Ready() before touching its data.
    waiting = [e for _n, _t, e in tensor_table]
    while waiting:
        waiting = [e for e in waiting if not e.query()]

    # BackgroundThreadLoop -> PerformOperation(ALLREDUCE), all on Horovod's stream.
    with torch.cuda.stream(hvd_stream):
        offset = 0
        for _name, t, _ev in tensor_table:  # MEMCPY_IN_FUSION_BUFFER: cudaMemcpyAsync(D2D, stream)
            fusion_buffer[offset:offset + t.numel()].copy_(t.view(-1))   # grads complete: their events were seen
            offset += t.numel()
        dist.all_reduce(fusion_buffer[:offset])                         # ncclAllReduce(..., stream)
        offset = 0
        for _name, t, _ev in tensor_table:  # MEMCPY_OUT_FUSION_BUFFER
            t.view(-1).copy_(fusion_buffer[offset:offset + t.numel()])
            offset += t.numel()
    done = torch.cuda.Event()
    done.record(hvd_stream)
    done.synchronize()                      # finalizer thread: wait for the event, then e.callback(Status::OK())

    # hvd.synchronize(handle) returned; the optimizer averages on the default stream.
    for g in grads:
        g.div_(world)
    sums = [round(g.sum().item(), 2) for g in grads]
    for i, g in enumerate(grads):   # reference: the same gradients averaged on the CPU
        ref = sum(reference_grads(r)[i] for r in range(world)) / world
        assert torch.allclose(g.cpu(), ref, atol=1e-5), f"grad {i} wrong"
    print(f"rank {rank}: averaged grad sums {sums}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
