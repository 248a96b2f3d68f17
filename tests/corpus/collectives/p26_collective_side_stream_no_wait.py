"""all_gather_into_tensor issued inside `with torch.cuda.stream(side)` on an input produced on the default stream, without waiting.

EXPECTED: hazard
KINDS: read-after-write
REASON: in torch>=2.8 a synchronous collective runs on the current stream (here: side), which is unordered with the default stream's producer.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    world = dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    shard = torch.randn(8192, device="cuda").mul_(rank + 1)    # default stream writes shard
    full = torch.empty(8192 * world, device="cuda")
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        dist.all_gather_into_tensor(full, shard)               # BUG: side never waited for default
    torch.cuda.current_stream().wait_stream(side)
    print(full.norm().item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
