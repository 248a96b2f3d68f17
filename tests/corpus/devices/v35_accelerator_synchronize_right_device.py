"""The fix of v34: torch.accelerator.synchronize(1), the device whose stream holds the pending copy, before the
host reads the pinned buffer; the host sees the copy's values.

EXPECTED: clean
WORLD_SIZE: 1
DEVICE_COUNT: 2
REASON: torch/accelerator/__init__.py synchronize(device) -> torch._C._accelerator_synchronizeDevice(index): the host waits for all work queued on that device (cudaDeviceSynchronize).
"""
import torch


def main():
    torch.cuda.set_device(0)
    src = torch.randn(1 << 18)
    x1 = src.to("cuda:1")
    host = torch.empty(1 << 18, pin_memory=True)
    host.copy_(x1 * 2, non_blocking=True)
    torch.accelerator.synchronize(1)
    assert torch.equal(host, src * 2)


if __name__ == "__main__":
    main()
