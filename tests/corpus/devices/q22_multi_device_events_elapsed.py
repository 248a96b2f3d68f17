"""Per-device current streams are independent: `torch.cuda.set_stream` on cuda:1 inside device(1), cuda:0's current
stream unchanged; torch.cuda.synchronize() of each device then host reads; cross-device event wait used correctly.

EXPECTED: clean
WORLD_SIZE: 1
DEVICE_COUNT: 2
REASON: cudaStreamWaitEvent accepts an event of another device; current streams are per device (torch.cuda.current_stream(device)).
"""
import torch


def main():
    d0_default = torch.cuda.current_stream(0)
    s0 = torch.cuda.Stream(device=0)
    s1 = torch.cuda.Stream(device=1)
    assert s1.device.index == 1 and s0.device.index == 0
    a = torch.randn(2048)
    x0 = a.cuda(0)
    s0.wait_stream(d0_default)
    with torch.cuda.stream(s0):
        u = x0 * 4
        ev0 = torch.cuda.Event()
        ev0.record(s0)
    # wait on cuda:0's event from a cuda:1 stream, then copy u to cuda:1 on that stream's device
    with torch.cuda.device(1):
        torch.cuda.set_stream(s1)
        assert torch.cuda.current_stream() == s1
        assert torch.cuda.current_stream(0) == d0_default
    s1.wait_event(ev0)
    d0_default.wait_event(ev0)
    with torch.cuda.device(1):
        v = torch.empty(2048, device="cuda:1")
        v.copy_(u)                          # ordered after ev0 on both devices' current streams
        w = v + 1
    u.record_stream(d0_default)
    torch.cuda.synchronize(0)
    torch.cuda.synchronize(1)
    assert torch.allclose(w.cpu(), a * 4 + 1)


if __name__ == "__main__":
    main()
