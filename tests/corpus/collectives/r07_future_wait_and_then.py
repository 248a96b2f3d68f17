"""async all_reduce consumed through work.get_future(): fut.wait() and a chained fut.then(cb).

EXPECTED: clean
REASON: a CUDA-aware c10 Future's wait() makes the current stream wait for the recorded events; then() runs the callback on streams that wait for the parent and the child future's wait() orders the current stream after it.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    world = dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    s = float(sum(range(1, world + 1)))
    x = torch.full((4096,), float(rank + 1), device="cuda")
    fut = dist.all_reduce(x, async_op=True).get_future()
    res = fut.wait()
    t = res[0] if isinstance(res, (list, tuple)) else res
    assert torch.all(t + 0 == s).item()

    z = torch.full((4096,), float(rank + 1), device="cuda")
    fut2 = dist.all_reduce(z, async_op=True).get_future()

    def cb(f):
        v = f.value()
        v = v[0] if isinstance(v, (list, tuple)) else v
        return v * 3.0
    chained = fut2.then(cb)
    r = chained.wait()
    assert torch.all(r == 3.0 * s).item()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
