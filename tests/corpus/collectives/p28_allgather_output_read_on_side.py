"""Synchronous all_gather_into_tensor on the default stream; the output is read on a side stream without waiting.

EXPECTED: hazard
KINDS: read-after-write
REASON: the sync collective is enqueued on the default stream (torch>=2.8); the side stream is unordered with it.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    world = dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    shard = torch.ones(4096, device="cuda") * rank
    out = torch.empty(4096 * world, device="cuda")
    dist.all_gather_into_tensor(out, shard)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        s = out.view(world, -1).sum(dim=1)   # BUG: no side.wait_stream(default)
    side.synchronize()
    print(s.tolist())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
