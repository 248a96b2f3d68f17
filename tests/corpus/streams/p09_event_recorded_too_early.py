"""Event is recorded on the side stream BEFORE the producing kernel is enqueued; consumer waits on it.

EXPECTED: hazard
KINDS: read-after-write
REASON: an event captures only work queued on the stream before record(); wait_event on it does not cover later work.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    a = torch.randn(512, device="cuda")
    side = torch.cuda.Stream()
    done = torch.cuda.Event()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        done.record()                      # BUG: recorded before the work
        b = torch.exp(a)
    torch.cuda.current_stream().wait_event(done)
    c = b + 1
    torch.cuda.synchronize()
    print(c.mean().item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
