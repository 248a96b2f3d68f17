"""irecv + wait() on default; a side stream that waited for default reads the payload; plus a batch_isend_irecv exchange whose send buffer is freed before wait.

EXPECTED: clean
REASON: wait() orders default after the NCCL receive; side.wait_stream(default) is transitive; async P2P tensors are kept alive by the Work until wait().
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    peer = 1 - rank
    got = torch.empty(1 << 14, device="cuda")
    if rank == 0:
        dist.isend(torch.full((1 << 14,), 5.0, device="cuda"), dst=1).wait()
    else:
        dist.irecv(got, src=0).wait()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            y = got * 2
        torch.cuda.current_stream().wait_stream(side)
        assert torch.all(y == 10.0).item()
    send = torch.full((2048,), float(rank + 1), device="cuda")
    recv = torch.empty(2048, device="cuda")
    reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, send, peer), dist.P2POp(dist.irecv, recv, peer)])
    del send
    junk = torch.empty(2048, device="cuda")
    junk.fill_(-1.0)
    for r in reqs:
        r.wait()
    assert torch.all(recv == float(peer + 1)).item() and torch.all(junk == -1.0).item()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
