"""y written on a cuda:1 side stream; event recorded there; cuda:0's current stream waits on the event; then
z = y * 2 (a cuda:1 tensor: runs on cuda:1's current stream, which never waited).

EXPECTED: hazard
KINDS: read-after-write
WORLD_SIZE: 1
DEVICE_COUNT: 2
REASON: kernels on cuda:1 tensors run on cuda:1's current stream regardless of the current device; the wait was on cuda:0's stream.
"""
import torch


def main():
    x1 = torch.randn(1 << 16, device="cuda:1")
    with torch.cuda.device(1):
        s1 = torch.cuda.Stream()
        s1.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s1):
        y = torch.cos(x1) + 1
    ev = torch.cuda.Event()
    ev.record(s1)
    torch.cuda.current_stream(0).wait_event(ev)     # BUG: orders cuda:0's stream, not cuda:1's
    z = y * 2
    print(z.sum().item())


if __name__ == "__main__":
    main()
