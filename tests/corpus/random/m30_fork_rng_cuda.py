"""torch.random.fork_rng(devices=[0]) around CUDA random draws (as evaluation loops and checkpoint do): inside,
the draws advance a copy; after, the CUDA and CPU generators continue where they were.

EXPECTED: clean
WORLD_SIZE: 1
REASON: torch/random.py fork_rng: saves torch.get_rng_state() and, per device, torch.cuda.get_rng_state(device), restores them on exit.
"""
import torch


def main():
    torch.cuda.set_device(0)
    torch.manual_seed(5)
    ref = torch.rand(256, device="cuda").cpu()
    torch.manual_seed(5)
    with torch.random.fork_rng(devices=[0]):
        torch.manual_seed(99)
        noise = torch.rand(256, device="cuda")
        torch.randn(10)
    after = torch.rand(256, device="cuda").cpu()
    assert torch.equal(after, ref)
    assert not torch.equal(noise.cpu(), ref)


if __name__ == "__main__":
    main()
