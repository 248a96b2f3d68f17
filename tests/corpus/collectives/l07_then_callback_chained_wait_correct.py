"""The fix of l06: the chained future's wait() before reading the callback's buffer; a second then() on the chained
future; all values checked.

EXPECTED: clean
MODELLED ON: torch/distributed/algorithms/ddp_comm_hooks/default_hooks.py `allreduce_hook`
(`fut.then(lambda fut: fut.value()[0])` after `tensor.div_(world)`).
REASON: torch/futures/__init__.py Future.then() / wait(): the child future's wait() makes the current stream wait
for the events recorded after the callback, so reading its result (or buffers the callback wrote) is ordered.
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

    def cb2(f):
        return f.value() + 1.0
    chained = fut.then(cb)
    second = chained.then(cb2)
    chained.wait()
    mean = sum(range(1, world + 1)) / world
    assert torch.all(out * 1 == mean).item()
    r = second.wait()
    assert torch.all(r == mean + 1.0).item()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
