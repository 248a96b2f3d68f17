"""Two new groups never used before; rank 0 first uses A then B, rank 1 first uses B then A (each on its own stream).

EXPECTED: error
ERROR: Deadlock|CollectiveMismatch
REASON: without device_id in init_process_group, ProcessGroupNCCL creates a group's communicator lazily at its first collective with a blocking ncclCommInitRank (rendezvous through the store); rank 0 blocks in A's init while rank 1 blocks in B's: a host hang regardless of streams.
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
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    a = torch.ones(16, device="cuda")
    b = torch.ones(16, device="cuda")
    s1.wait_stream(torch.cuda.current_stream())
    s2.wait_stream(torch.cuda.current_stream())
    order = [(s1, a, ga), (s2, b, gb)]
    if rank == 1:
        order.reverse()
    for s, t, g in order:
        with torch.cuda.stream(s):
            dist.all_reduce(t, group=g)
    torch.cuda.synchronize()
    print(a[0].item(), b[0].item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
