"""Two warmed-up world-sized groups; rank-dependent issue order, but group A's collective on stream s1 and group B's on stream s2; everything joined back and values checked.

EXPECTED: clean-or-error
ERROR: Deadlock|CollectiveMismatch
REASON: on different streams the two NCCL kernels can be co-resident and both complete, but NCCL does not guarantee concurrent scheduling (docs: inconsistent order across communicators may deadlock): either outcome is acceptable, no hazard.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    world = dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    ga = dist.new_group(list(range(world)))
    gb = dist.new_group(list(range(world)))
    w = torch.ones(8, device="cuda")
    dist.all_reduce(w, group=ga)
    dist.all_reduce(w, group=gb)
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    cur = torch.cuda.current_stream()
    a = torch.full((1024,), float(rank + 1), device="cuda")
    b = torch.full((1024,), float(rank + 2), device="cuda")
    s1.wait_stream(cur)
    s2.wait_stream(cur)
    order = [("a", s1, a, ga), ("b", s2, b, gb)]
    if rank % 2 == 1:
        order.reverse()
    for _, s, t, g in order:
        with torch.cuda.stream(s):
            dist.all_reduce(t, group=g)
    cur.wait_stream(s1)
    cur.wait_stream(s2)
    sa = float(sum(r + 1 for r in range(world)))
    sb = float(sum(r + 2 for r in range(world)))
    assert torch.all(a == sa).item() and torch.all(b == sb).item()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
