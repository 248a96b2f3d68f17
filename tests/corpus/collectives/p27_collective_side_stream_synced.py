"""As p26, with side.wait_stream(default) before and default.wait_stream(side) after; full is allocated on side and consumed on default.

EXPECTED: clean
REASON: both directions are ordered; the output stays alive until after the host sync, so no record_stream is needed.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    world = dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    shard = torch.arange(100, device="cuda", dtype=torch.float32) + 1000 * rank
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        full = torch.empty(100 * world, device="cuda")
        dist.all_gather_into_tensor(full, shard)
    torch.cuda.current_stream().wait_stream(side)
    got = (full.view(world, 100) - torch.arange(100, device="cuda")).amax(dim=1).tolist()
    assert got == [1000.0 * r for r in range(world)], got
    torch.cuda.synchronize()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
