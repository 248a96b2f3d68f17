"""async all_reduce's future polled with fut.done() and its value() read on the current stream without fut.wait().

EXPECTED: hazard
KINDS: read-after-write
MODELLED ON: code that treats a CUDA Future like a CPU one (`while not fut.done(): ...; t = fut.value()[0]`).
REASON: torch/futures/__init__.py Future.done(): "If the value contains tensors that reside on GPUs,
Future.done() will return True even if the asynchronous kernels that are populating those tensors haven't yet
completed running on the device"; Future.value(): "this method will *not* perform any additional synchronization.
This should be done beforehand, separately, through a call to wait()". ProcessGroupNCCL marks the work's future
completed at enqueue, with the collective's end event, so the current stream is never ordered after the
all_reduce on the NCCL stream.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    x = torch.full((1 << 14,), float(rank + 1), device="cuda")
    fut = dist.all_reduce(x, async_op=True).get_future()
    while not fut.done():
        pass
    v = fut.value()
    t = v[0] if isinstance(v, (list, tuple)) else v
    y = t * 2                                   # BUG: no fut.wait(): the current stream is not ordered after NCCL
    print(y.sum().item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
