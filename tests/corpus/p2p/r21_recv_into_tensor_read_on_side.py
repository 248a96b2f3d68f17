"""A buffer is being read on a side stream (as the previous iteration's input) while dist.recv writes the next payload into it on the default stream.

EXPECTED: hazard
KINDS: write-after-read
NOTE: only rank 1 receives; the race is on rank 1.
REASON: recv (sync, 2.8) runs on the current stream, which never waited for the side stream's read of the same buffer.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    side = torch.cuda.Stream()
    buf = torch.full((1 << 16,), 1.0, device="cuda")
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        acc = (buf * 3.0).sum()                 # side reads buf
    if rank == 0:
        dist.send(torch.full((1 << 16,), 9.0, device="cuda"), dst=1)
    else:
        dist.recv(buf, src=0)                    # BUG: overwrites buf while side may still read it
    torch.cuda.synchronize()
    print(acc.item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
