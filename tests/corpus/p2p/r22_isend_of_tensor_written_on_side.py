"""A payload is produced on a side stream; isend is issued from the default stream without waiting on side.

EXPECTED: hazard
KINDS: read-after-write
REASON: an async P2P op's NCCL stream waits only for the current (default) stream; the side stream's write is unordered with the send's read.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    side = torch.cuda.Stream()
    if rank == 0:
        payload = torch.empty(1 << 16, device="cuda")
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            payload.fill_(4.0)
            payload.mul_(2.0)
        req = dist.isend(payload, dst=1)            # BUG: no wait on side
        req.wait()
        torch.cuda.current_stream().wait_stream(side)
    else:
        got = torch.empty(1 << 16, device="cuda")
        dist.irecv(got, src=0).wait()
        print(got[0].item())
    torch.cuda.synchronize()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
