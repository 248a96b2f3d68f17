"""The bug twin of m09: the copy runs on device 1 but the host synchronizes device 0 (the current one) before
reading the pinned buffer.

EXPECTED: hazard
KINDS: host-read
WORLD_SIZE: 1
DEVICE_COUNT: 2
REASON: torch.cuda.synchronize() with no argument synchronizes the current device only (torch/cuda/__init__.py; cudaDeviceSynchronize is per device).
"""
import torch


def main():
    torch.cuda.set_device(0)
    a = torch.randn(1 << 16)
    buf = torch.empty(1 << 16, pin_memory=True)
    with torch.cuda.device(1):
        x = a.to("cuda:1")
        y = torch.exp(x)
        buf.copy_(y, non_blocking=True)
    torch.cuda.synchronize()            # BUG: device 0, not device 1
    print(buf.sum().item())
    torch.cuda.synchronize(1)


if __name__ == "__main__":
    main()
