"""async all_reduce; the host polls work.is_completed() until True, then reads the output on the default stream without wait().

EXPECTED: clean
REASON: Work.is_completed() for NCCL queries the work's end events; once the host has seen completion, work launched afterwards runs after the collective (torch docs: output "can be utilized on the default stream without further synchronization").
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
    work = dist.all_reduce(x, async_op=True)
    polls = 0
    while not work.is_completed():
        polls += 1
    y = x + 1.0
    exp = float(sum(range(1, world + 1))) + 1.0
    assert torch.all(y == exp).item(), y[0].item()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
