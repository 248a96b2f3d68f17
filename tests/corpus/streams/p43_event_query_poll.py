"""Host polls event.query() until the side stream's work is done, then consumes on the default stream.

EXPECTED: clean
REASON: once query() returns True the recorded work has completed; later launches on any stream are after it.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    x = torch.ones(1 << 16, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    ev = torch.cuda.Event()
    with torch.cuda.stream(side):
        y = x * 4
        for _ in range(10):
            y = y + 1
        ev.record()
    spins = 0
    while not ev.query():
        spins += 1
    z = y.sum()
    assert z.item() == 14.0 * (1 << 16), z.item()
    assert side.query()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
