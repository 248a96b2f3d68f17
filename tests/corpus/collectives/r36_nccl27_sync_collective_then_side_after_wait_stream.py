"""NCCL 2.7 profile: a sync all_reduce on the default stream; a side stream then waits for the default stream and reads the result.

EXPECTED: clean
NCCL: 2.7
REASON: torch<2.8 runs the collective on the internal NCCL stream and makes the current stream wait for it before returning (sync op); side.wait_stream(default) is then ordered after the collective transitively.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    world = dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    x = torch.full((1 << 14,), float(rank + 1), device="cuda")
    dist.all_reduce(x)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        y = x * 2.0
    torch.cuda.current_stream().wait_stream(side)
    assert torch.all(y == 2.0 * sum(range(1, world + 1))).item()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
