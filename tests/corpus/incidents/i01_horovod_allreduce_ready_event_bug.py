"""I1 Horovod 0.13.3-0.13.7: the allreduce read the gradients before the kernels that produced them had finished.

EXPECTED: hazard
KINDS: read-after-write
KINDS_ALSO: write-after-write
NCCL: 2.8
INCIDENT: https://github.com/horovod/horovod/pull/363 ("Critical Bugfix: PyTorch must wait for GPU data before
allreduce", 2018). The bug came with pull/276, which moved Horovod's GPU work from stream 0 to a stream of its own
(`cudaStreamCreateWithPriority(&stream, cudaStreamNonBlocking, greatest_priority)`): before it, the legacy default
stream's implicit synchronization had ordered the copies after PyTorch's kernels; after it nothing did.
MODELLED ON: horovod/common/operations.cc `PerformOperation` (ALLREDUCE on GPU: on `horovod_global.streams[device]`
MEMCPY_IN_FUSION_BUFFER with cudaMemcpyAsync, ncclAllReduce, MEMCPY_OUT_FUSION_BUFFER; a finalizer thread waits for
an event on that stream, then calls the callback that `hvd.synchronize(handle)` waits for) and
horovod/torch/mpi_ops.py `allreduce_async_` / `synchronize`. The fix (pull/363) is horovod/torch/ready_event.cc
`TorchReadyEvent`: an event recorded on the caller's current stream at enqueue, polled by the background thread
(WAIT_FOR_DATA) before the fusion-buffer copies; see i01_horovod_allreduce_ready_event_fix.py.
SIMPLIFIED: the background thread's steps run on the rank's own host thread, right after the enqueue (the race is
between streams, not host threads); Horovod's own NCCL communicator is torch.distributed's, launched with
`all_reduce` while Horovod's stream is current (NCCL profile 2.8: a synchronous collective runs on the current
stream, as ncclAllReduce(..., stream) did); the backward pass is three elementwise kernels per gradient.
RULE: kernels on two streams are unordered unless an event or wait orders them (CUDA Programming Guide, "Streams";
torch.cuda.Stream docs); a host thread issuing work in program order orders nothing on the device.
WHAT SIMDIST SAYS: read-after-write between the backward kernel that writes each gradient (default stream) and the
MEMCPY_IN copy_ on Horovod's stream (and write-after-write between that kernel and MEMCPY_OUT, which writes the
gradient back in place, as allreduce_async_ does).
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


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    # horovod_global.streams[device] (operations.cc): a non-blocking stream of the greatest priority
    hvd_stream = torch.cuda.Stream(priority=-1)
    fusion_buffer = torch.empty(FUSION_ELEMS, device="cuda")   # FusionBufferManager: kept for the whole run

    grads = backward(rank)

    # hvd.allreduce_async_(grad, name=...) for each grad: the entry goes into horovod_global.tensor_table.
    # BUG (0.13.3-0.13.7): no ready_event is recorded on the caller's stream.
    tensor_table = [(f"grad.{i}", g) for i, g in enumerate(grads)]

    # BackgroundThreadLoop -> PerformOperation(ALLREDUCE), all on Horovod's stream.
    with torch.cuda.stream(hvd_stream):
        offset = 0
        for _name, t in tensor_table:       # MEMCPY_IN_FUSION_BUFFER: cudaMemcpyAsync(D2D, stream)
            fusion_buffer[offset:offset + t.numel()].copy_(t.view(-1))   # reads grads the default stream may still write
            offset += t.numel()
        dist.all_reduce(fusion_buffer[:offset])                         # ncclAllReduce(..., stream)
        offset = 0
        for _name, t in tensor_table:       # MEMCPY_OUT_FUSION_BUFFER
            t.view(-1).copy_(fusion_buffer[offset:offset + t.numel()])
            offset += t.numel()
    done = torch.cuda.Event()
    done.record(hvd_stream)
    done.synchronize()                      # finalizer thread: wait for the event, then e.callback(Status::OK())

    # hvd.synchronize(handle) returned; the optimizer averages on the default stream.
    for g in grads:
        g.div_(world)
    sums = [round(g.sum().item(), 2) for g in grads]
    print(f"rank {rank}: averaged grad sums {sums}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
