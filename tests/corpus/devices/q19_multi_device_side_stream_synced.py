"""Streams per device: inside `with torch.cuda.device(1)` a side stream of cuda:1 computes y; an event recorded there is
waited by cuda:1's current stream; then y.to("cuda:0") and an all-device check.

EXPECTED: clean
WORLD_SIZE: 1
DEVICE_COUNT: 2
REASON: torch.cuda.Stream() inside device(1) belongs to cuda:1; the wait_event orders cuda:1's current stream (which the D2D copy uses) after y.
"""
import torch


def main():
    a = torch.arange(4096, dtype=torch.float32)
    x1 = a.to("cuda:1")
    with torch.cuda.device(1):
        s1 = torch.cuda.Stream()
        assert s1.device == torch.device("cuda:1")
        assert torch.cuda.current_device() == 1
        s1.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s1):
            y = x1 * 2 + 1
            ev = torch.cuda.Event()
            ev.record()
        torch.cuda.current_stream().wait_event(ev)
        y.record_stream(torch.cuda.current_stream())
    assert torch.cuda.current_device() == 0
    y0 = y.to("cuda:0")
    r = (y0 - 1).div(2)
    assert torch.equal(r.cpu(), a)


if __name__ == "__main__":
    main()
