"""batch_isend_irecv: every rank sends to both neighbours and receives from both, in one batch, with distinct payload sizes per direction.

EXPECTED: clean
WORLD_SIZE: 3
REASON: batched P2P ops are grouped (ncclGroupStart/End) so their order inside the batch cannot deadlock; req.wait() orders the current stream after the receives.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    world = dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    right, left = (rank + 1) % world, (rank - 1) % world
    to_right = torch.full((100,), float(rank), device="cuda")
    to_left = torch.full((200,), float(-rank - 1), device="cuda")
    from_left = torch.empty(100, device="cuda")      # left's to_right
    from_right = torch.empty(200, device="cuda")     # right's to_left
    ops = [dist.P2POp(dist.irecv, from_left, left),
           dist.P2POp(dist.isend, to_right, right),
           dist.P2POp(dist.isend, to_left, left),
           dist.P2POp(dist.irecv, from_right, right)]
    for r in dist.batch_isend_irecv(ops):
        r.wait()
    assert torch.all(from_left == float(left)).item()
    assert torch.all(from_right == float(-right - 1)).item()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
