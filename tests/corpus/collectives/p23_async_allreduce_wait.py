"""async all_reduce, work.wait(), then use the output on the default stream.

EXPECTED: clean
REASON: work.wait() makes the current stream wait for the NCCL stream (torch.distributed async work semantics).
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    world = dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    x = torch.full((2048,), float(rank), device="cuda")
    work = dist.all_reduce(x, op=dist.ReduceOp.SUM, async_op=True)
    other = torch.ones(2048, device="cuda") * 3
    work.wait()
    y = x + other
    expect = float(sum(range(world))) + 3.0
    assert torch.all(y == expect).item()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
