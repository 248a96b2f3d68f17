"""A pipeline stage isends each micro-batch's activation and drops its reference at once; the next micro-batch's
activation is allocated on the same stream before the requests are waited at the end; the receiver checks every
micro-batch's values.

EXPECTED: clean
WORLD_SIZE: 2
MODELLED ON: pipeline schedules that keep only the request (`reqs.append(dist.isend(act, peer))`) and wait all
requests at the end of the schedule.
REASON: ProcessGroupNCCL keeps the tensors of an async op alive until the work is waited (torch >= 2.8: the Work
stashes them instead of record_stream, ProcessGroupNCCL.cpp `stashed_for_allocator_safety_`), so the freed
activation's block is not reused while the send may still read it.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    N, M = 1 << 14, 3
    if rank == 0:
        reqs = []
        for m in range(M):
            act = torch.full((N,), float(m + 1), device="cuda") * 2
            reqs.append(dist.isend(act, dst=1))
            del act                                 # only the request is kept
        for r in reqs:
            r.wait()
    else:
        for m in range(M):
            buf = torch.empty(N, device="cuda")
            dist.recv(buf, src=0)
            assert torch.all(buf.cpu() == 2.0 * (m + 1)).item(), (m, buf[0].item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
