"""Pipeline stage exchange with batch_isend_irecv: the next microbatch is written into the send buffer before the
previous batch's requests are waited.

EXPECTED: hazard
KINDS: write-after-read
MODELLED ON: megatron/core/pipeline_parallel/p2p_communication.py `_batched_p2p_ops` (a list of
dist.P2POp(dist.isend / dist.irecv, tensor, peer, group) handed to dist.batch_isend_irecv, the requests waited
later when overlap_p2p_comm is on); the bug is reusing the send tensor for the next microbatch first.
REASON: batch_isend_irecv's ops run on the NCCL p2p stream and read the send buffer there; req.wait() is what
orders the current stream after them (torch.distributed docs: batch_isend_irecv returns a list of request objects;
isend: "modifying tensor before the request completes causes undefined behavior").
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    peer = (rank + 1) % world
    src = (rank - 1) % world
    send_buf = torch.empty(1 << 14, device="cuda")
    recv_buf = torch.empty(1 << 14, device="cuda")
    for mb in range(2):
        send_buf.fill_(float(10 * rank + mb))   # BUG at mb=1: the previous isend may still read send_buf
        ops = [dist.P2POp(dist.isend, send_buf, peer), dist.P2POp(dist.irecv, recv_buf, src)]
        reqs = dist.batch_isend_irecv(ops)
        if mb == 1:
            for r in reqs:
                r.wait()
        else:
            pending = reqs                       # overlap: waited "later"
    for r in pending:
        r.wait()
    print(recv_buf[0].item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
