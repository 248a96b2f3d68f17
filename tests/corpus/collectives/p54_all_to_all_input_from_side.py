"""all_to_all_single on the default stream whose input was just produced on a side stream, without waiting.

EXPECTED: hazard
KINDS: read-after-write
REASON: the collective runs on the default stream (torch>=2.8) and reads the input before the side stream's write is ordered.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    world = dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    tokens = torch.randn(world * 256, 16, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        routed = (tokens * (rank + 1)).to(torch.bfloat16)
    out = torch.empty_like(routed)
    dist.all_to_all_single(out, routed)    # BUG: default never waited for side
    torch.cuda.synchronize()
    print(out.float().abs().sum().item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
