"""send/recv pairs with tags (tag=7 then tag=9, different sizes), received in the same order; then isend/irecv with tags.

EXPECTED: clean
REASON: matched P2P calls in the same order on both sides (ProcessGroupNCCL ignores tags and matches by order, so same-order tags are correct everywhere).
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    if rank == 0:
        dist.send(torch.arange(10, device="cuda", dtype=torch.float32), dst=1, tag=7)
        dist.send(torch.arange(30, device="cuda", dtype=torch.int64) * 2, dst=1, tag=9)
        r = torch.empty(5, device="cuda", dtype=torch.int32)
        dist.irecv(r, src=1, tag=3).wait()
        assert r.tolist() == [5, 6, 7, 8, 9]
    else:
        a = torch.empty(10, device="cuda")
        b = torch.empty(30, device="cuda", dtype=torch.int64)
        dist.recv(a, src=0, tag=7)
        dist.recv(b, src=0, tag=9)
        assert a.tolist() == [float(i) for i in range(10)]
        assert b.tolist() == [2 * i for i in range(30)]
        w = dist.isend(torch.arange(5, 10, device="cuda", dtype=torch.int32), dst=0, tag=3)
        w.wait()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
