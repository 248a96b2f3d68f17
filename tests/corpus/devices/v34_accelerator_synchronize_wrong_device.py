"""Device-generic host synchronization on the wrong device: a non_blocking copy from cuda:1 into pinned host
memory is pending, and the host calls torch.accelerator.synchronize(0) (the current device) before reading the
buffer; synchronizing cuda:0 waits for nothing queued on cuda:1, so the host read races the copy.

EXPECTED: hazard
KINDS: host-read
WORLD_SIZE: 1
DEVICE_COUNT: 2
REASON: torch/accelerator/__init__.py synchronize(device): torch._C._accelerator_synchronizeDevice(index) (cudaDeviceSynchronize on that device only); a non_blocking D2H copy into pinned memory returns before it has run (https://pytorch.org/docs/stable/notes/cuda.html#use-pinned-memory-buffers).
"""
import torch


def main():
    torch.cuda.set_device(0)
    x1 = torch.randn(1 << 18, device="cuda:1")
    host = torch.empty(1 << 18, pin_memory=True)
    host.copy_(x1 * 2, non_blocking=True)        # queued on cuda:1's current stream
    torch.accelerator.synchronize(0)             # BUG: cuda:0, not cuda:1
    print(host.sum().item())


if __name__ == "__main__":
    main()
