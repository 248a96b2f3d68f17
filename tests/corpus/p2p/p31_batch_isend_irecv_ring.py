"""Ring exchange with batch_isend_irecv; wait on all requests, then use the received buffer.

EXPECTED: clean
WORLD_SIZE: 4
REASON: req.wait() makes the current stream wait for the P2P work before the buffer is read.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    world = dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    send_buf = torch.full((512,), float(rank), device="cuda")
    recv_buf = torch.empty(512, device="cuda")
    ops = [dist.P2POp(dist.isend, send_buf, (rank + 1) % world),
           dist.P2POp(dist.irecv, recv_buf, (rank - 1) % world)]
    reqs = dist.batch_isend_irecv(ops)
    for r in reqs:
        r.wait()
    got = recv_buf.mean().item()
    assert got == float((rank - 1) % world), got
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
