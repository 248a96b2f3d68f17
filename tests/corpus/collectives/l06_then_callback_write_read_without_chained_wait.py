"""fut.then(cb) whose callback writes a result buffer; the main code waits only the parent future and reads the
buffer: the callback's kernels run on a pool stream the current stream never waited for.

EXPECTED: hazard
KINDS: read-after-write
MODELLED ON: DDP comm hooks / torch.futures usage that chains a post-processing step (`fut.then(lambda f:
out.copy_(f.value()[0]).div_(n))`) and then reads `out` after waiting the wrong future.
REASON: torch/futures/__init__.py Future.then(): for CUDA futures the callback is invoked "on a stream ... that
waits for the parent's events" (a stream from the pool, set current for the callback); only the child future's
wait() makes the caller's current stream wait for the callback's work (c10 ivalue::Future::then,
CUDAFuture). Waiting the parent orders the current stream after the all_reduce, not after the callback.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    x = torch.full((1 << 14,), float(rank + 1), device="cuda")
    out = torch.zeros_like(x)
    fut = dist.all_reduce(x, async_op=True).get_future()

    def cb(f):
        v = f.value()
        v = v[0] if isinstance(v, (list, tuple)) else v
        out.copy_(v).div_(world)
        return out
    chained = fut.then(cb)
    fut.wait()                                   # BUG: the parent, not `chained`
    print((out * 1).sum().item())
    chained.wait()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
