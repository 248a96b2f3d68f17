"""A generic torch.Event recorded on the side stream before the kernel it is meant to cover (the common
"record too early" slip), then waited on the accelerator's current stream: the wait orders nothing about the
kernel launched after the record, so the consumer on the default stream races it.

EXPECTED: hazard
KINDS: read-after-write
WORLD_SIZE: 1
REASON: torch.Event.record captures only the work queued on the stream so far (cudaEventRecord; https://pytorch.org/docs/stable/generated/torch.Event.html); Event.wait(stream) makes later work on `stream` wait for that captured work only.
"""
import torch


def main():
    torch.cuda.set_device(0)
    side = torch.cuda.Stream()
    x = torch.randn(1 << 18, device="cuda")
    side.wait_stream(torch.accelerator.current_stream())
    ev = torch.Event(device="cuda")
    with torch.cuda.stream(side):
        ev.record()                    # BUG: before the producer
        y = x.exp()
    ev.wait(torch.accelerator.current_stream())
    z = y * 2
    y.record_stream(torch.cuda.current_stream())
    print(z.sum().item())


if __name__ == "__main__":
    main()
