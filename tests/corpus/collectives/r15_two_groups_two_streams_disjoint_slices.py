"""Two world-sized groups; all_gather_into_tensor on group A from stream s1 into buf[:H] and on group B from stream s2 into buf[H:], concurrently; both joined back.

EXPECTED: clean
REASON: sync collectives (2.8) run on the current stream; the two write disjoint byte ranges of one buffer; s1/s2 waited for the default stream before and default waits for both after; same order on every rank.
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
    buf = torch.empty(2 * H, device="cuda")
    xa = torch.full((N,), float(rank), device="cuda")
    xb = torch.full((N,), float(10 + rank), device="cuda")
    cur = torch.cuda.current_stream()
    s1.wait_stream(cur)
    s2.wait_stream(cur)
    with torch.cuda.stream(s1):
        dist.all_gather_into_tensor(buf[:H], xa, group=ga)
    with torch.cuda.stream(s2):
        dist.all_gather_into_tensor(buf[H:], xb, group=gb)
    cur.wait_stream(s1)
    cur.wait_stream(s2)
    exp = torch.cat([torch.full((N,), float(r)) for r in range(world)] +
                    [torch.full((N,), float(10 + r)) for r in range(world)])
    assert torch.equal(buf.cpu(), exp)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
