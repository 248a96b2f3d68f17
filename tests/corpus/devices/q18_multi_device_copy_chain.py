"""One rank, two devices: x on cuda:0 -> .to("cuda:1") -> compute on cuda:1 -> copy_ back into a cuda:0 tensor -> cpu.

EXPECTED: clean
WORLD_SIZE: 1
DEVICE_COUNT: 2
REASON: a device-to-device copy is ordered on both devices' current streams (ATen Copy.cu copy_device_to_device syncs src and dst current streams).
"""
import torch


def main():
    assert torch.cuda.device_count() == 2, torch.cuda.device_count()
    a = torch.randn(1000)
    x = a.to("cuda:0") * 3
    y = x.to("cuda:1")
    assert y.device == torch.device("cuda:1")
    z = torch.sin(y) + 1
    back = torch.empty(1000, device="cuda:0")
    back.copy_(z)
    w = back * 2
    assert torch.allclose(w.cpu(), (torch.sin(a * 3) + 1) * 2, atol=1e-6)
    assert torch.allclose(z.cpu(), torch.sin(a * 3) + 1, atol=1e-6)


if __name__ == "__main__":
    main()
