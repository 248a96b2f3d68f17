"""torch.accelerator.device_index(i) (how device-generic code, e.g. torch/distributed/utils.py _recursive_to and
nn.parallel's parallel_apply, enters a device) makes GPU i current for torch.cuda too: "cuda" tensors made
inside land on GPU 1, torch.cuda.current_device() says 1, and the previous device comes back at exit; likewise
set_device_index.

EXPECTED: clean
WORLD_SIZE: 1
DEVICE_COUNT: 2
REASON: torch/accelerator/__init__.py device_index.__enter__ -> torch._C._accelerator_exchangeDevice(idx) (c10::impl::VirtualGuardImpl::exchangeDevice: the CUDA guard's device, the one torch.cuda.current_device() reads), __exit__ -> _accelerator_maybeExchangeDevice(prev).
"""
import torch


def main():
    torch.cuda.set_device(0)
    assert torch.accelerator.current_device_index() == 0
    with torch.accelerator.device_index(1):
        assert torch.cuda.current_device() == 1 and torch.accelerator.current_device_index() == 1
        t = torch.arange(6.0, device="cuda")
        s = torch.accelerator.current_stream()
        assert s.device_index == 1 and s.stream_id == torch.cuda.current_stream(1).stream_id  # a torch.Stream: not == (H200)
    assert t.device == torch.device("cuda", 1)
    assert torch.cuda.current_device() == 0
    torch.accelerator.set_device_index(1)
    u = torch.ones(3, device="cuda")
    assert u.device.index == 1 and torch.cuda.current_device() == 1
    torch.accelerator.set_device_index(0)
    assert (t.sum() + u.sum()).item() == 18.0


if __name__ == "__main__":
    main()
