"""As r15 but the two all_gather outputs overlap by N elements of one buffer.

EXPECTED: hazard
KINDS: write-after-write
REASON: the two collectives run on unsynchronized streams s1 and s2 and both write the overlapping range.
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
    ga = dist.new_group(list(range(world)))
    gb = dist.new_group(list(range(world)))
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    H = world * N
    buf = torch.zeros(2 * H, device="cuda")
    xa = torch.full((N,), float(rank), device="cuda")
    xb = torch.full((N,), float(10 + rank), device="cuda")
    cur = torch.cuda.current_stream()
    s1.wait_stream(cur)
    s2.wait_stream(cur)
    with torch.cuda.stream(s1):
        dist.all_gather_into_tensor(buf[:H], xa, group=ga)
    with torch.cuda.stream(s2):
        dist.all_gather_into_tensor(buf[H - N:2 * H - N], xb, group=gb)   # BUG: overlaps buf[H-N:H]
    cur.wait_stream(s1)
    cur.wait_stream(s2)
    print(buf[H - 1].item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
