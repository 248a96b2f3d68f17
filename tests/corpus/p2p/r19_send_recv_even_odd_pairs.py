"""Blocking send/recv between pairs (0,1),(2,3): even ranks send then recv, odd ranks recv then send; repeated 3 times with changing payloads.

EXPECTED: clean
WORLD_SIZE: 4
REASON: matched P2P order on both sides; sync P2P ops are ordered on the current stream.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    peer = rank ^ 1
    for it in range(3):
        mine = torch.arange(257, device="cuda", dtype=torch.float32) * (rank + 1) + it
        got = torch.empty(257, device="cuda")
        if rank % 2 == 0:
            dist.send(mine, dst=peer)
            dist.recv(got, src=peer)
        else:
            dist.recv(got, src=peer)
            dist.send(mine, dst=peer)
        exp = torch.arange(257, dtype=torch.float32) * (peer + 1) + it
        assert torch.equal(got.cpu(), exp), (it, got[:3])
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
