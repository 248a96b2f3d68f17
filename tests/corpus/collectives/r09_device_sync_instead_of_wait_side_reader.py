"""async reduce_scatter_tensor, no wait(); torch.cuda.synchronize(); the output is then read on a fresh side stream.

EXPECTED: clean
REASON: torch.cuda.synchronize() blocks the host until every stream of the device, the NCCL stream included, is idle; later launches on any stream come after.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    world = dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    inp = torch.arange(world * 1024, device="cuda", dtype=torch.float32) * (rank + 1)
    out = torch.empty(1024, device="cuda")
    dist.reduce_scatter_tensor(out, inp, async_op=True)
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        y = out * 1.0
    side.synchronize()
    tot = float(sum(range(1, world + 1)))
    exp = (torch.arange(world * 1024, dtype=torch.float32) * tot)[rank * 1024:(rank + 1) * 1024]
    assert torch.equal(y.cpu(), exp)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
