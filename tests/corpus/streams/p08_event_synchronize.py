"""Event recorded after side-stream work, event.synchronize(), then host read via .tolist().

EXPECTED: clean
REASON: Event.synchronize() blocks the host until the recorded work completes; the later D2H copy is ordered after it.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    v = torch.linspace(0, 1, 11, device="cuda")
    side = torch.cuda.Stream()
    ev = torch.cuda.Event()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        w = (v * 10).round().to(torch.int64)
        ev.record()
    ev.synchronize()
    assert w.tolist() == list(range(11)), w.tolist()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
