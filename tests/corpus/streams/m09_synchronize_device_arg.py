"""torch.cuda.synchronize(device) for a device that is not the current one (int, string and torch.device forms):
the host waits for every stream of that device, so a non-blocking D2H copy made there can be read.

EXPECTED: clean
WORLD_SIZE: 1
DEVICE_COUNT: 2
REASON: torch/cuda/__init__.py synchronize(device): `with torch.cuda.device(device): return torch._C._cuda_synchronize()` (cudaDeviceSynchronize of that device: all its streams).
"""
import torch


def main():
    torch.cuda.set_device(0)
    a = torch.randn(4096)
    bufs = [torch.empty(4096, pin_memory=True) for _ in range(3)]
    with torch.cuda.device(1):
        side = torch.cuda.Stream()
        x = a.to("cuda:1")
        side.wait_stream(torch.cuda.current_stream())
    for i, dev in enumerate((1, "cuda:1", torch.device("cuda", 1))):
        with torch.cuda.stream(side):
            y = x * (i + 2)
            bufs[i].copy_(y, non_blocking=True)
        torch.cuda.synchronize(dev)
        assert torch.cuda.current_device() == 0
        assert torch.equal(bufs[i], a * (i + 2)), i


if __name__ == "__main__":
    main()
