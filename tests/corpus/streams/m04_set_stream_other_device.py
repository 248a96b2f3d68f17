"""torch.cuda.set_stream(s) with s on another device makes that device current too (as the C++ binding does),
so a later torch.empty(device="cuda") is allocated on it and the stream context of that device is s.

EXPECTED: clean
WORLD_SIZE: 1
DEVICE_COUNT: 2
REASON: torch/csrc/cuda/Module.cpp THCPModule_setStream_wrap: `if (device != stream.device_index()) THCPModule_setDevice(stream.device_index()); at::cuda::setCurrentCUDAStream(stream);`
"""
import torch


def main():
    torch.cuda.set_device(0)
    s1 = torch.cuda.Stream(device=1)
    torch.cuda.set_stream(s1)
    assert torch.cuda.current_device() == 1, torch.cuda.current_device()
    assert torch.cuda.current_stream() == s1
    t = torch.ones(8, device="cuda")
    assert t.device == torch.device("cuda", 1), t.device
    u = t * 3
    torch.cuda.set_stream(torch.cuda.default_stream(0))
    assert torch.cuda.current_device() == 0
    assert torch.cuda.current_stream(1) == s1           # device 1 keeps s1 as its current stream
    s1.synchronize()
    assert torch.equal(u.cpu(), torch.full((8,), 3.0))
    torch.cuda.set_stream(torch.cuda.default_stream(1))
    torch.cuda.set_device(0)
    assert torch.cuda.current_device() == 0


if __name__ == "__main__":
    main()
