"""A side stream reads buf[:H] while an async all_gather writes buf[H:] (disjoint), then both are joined and checked.

EXPECTED: clean
REASON: concurrent accesses to disjoint byte ranges of one allocation do not race; wait() and wait_stream join them before the values are used.
"""
import os
import torch
import torch.distributed as dist

N = 4096


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    world = dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    H = world * N
    buf = torch.empty(2 * H, device="cuda")
    buf[:H].fill_(2.0)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        s = buf[:H].sum()
    w = dist.all_gather_into_tensor(buf[H:], torch.full((N,), float(rank), device="cuda"), async_op=True)
    w.wait()
    torch.cuda.current_stream().wait_stream(side)
    assert s.item() == 2.0 * H
    exp = torch.cat([torch.full((N,), float(r)) for r in range(world)])
    assert torch.equal(buf[H:].cpu(), exp)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
