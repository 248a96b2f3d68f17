"""Event recorded after the first write, but the side stream writes the tensor again after the record.

EXPECTED: hazard
KINDS: read-after-write
REASON: wait_event only orders against work queued before event.record(); the later in-place add_ is unordered with the reader.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    x = torch.ones(1024, device="cuda")
    side = torch.cuda.Stream()
    ev = torch.cuda.Event()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        y = x * 2
        ev.record()
        y.add_(1)                          # BUG: after the record
    torch.cuda.current_stream().wait_event(ev)
    z = y * 10                             # reads y
    torch.cuda.current_stream().wait_stream(side)
    print(z.sum().item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
