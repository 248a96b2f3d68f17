"""The device-generic memory API (torch.accelerator.memory_*, torch 2.8+, used by torchtitan and accelerate's
device-agnostic paths) reports the same figures as torch.cuda's on a CUDA machine.

EXPECTED: clean
WORLD_SIZE: 1
REASON: torch/accelerator/memory.py: memory_allocated / max_memory_allocated / memory_reserved / max_memory_reserved read allocated_bytes.all.current / .peak and reserved_bytes.all.current / .peak of memory_stats(), the current accelerator's (CUDA's) caching allocator.
"""
import torch


def main():
    torch.cuda.set_device(0)
    assert torch.accelerator.current_accelerator().type == "cuda"
    x = torch.empty(1 << 20, device="cuda")
    y = torch.empty(300, device="cuda")
    assert torch.accelerator.memory_allocated() == torch.cuda.memory_allocated() > 0
    assert torch.accelerator.memory_reserved() == torch.cuda.memory_reserved() > 0
    assert torch.accelerator.max_memory_allocated() == torch.cuda.max_memory_allocated()
    assert torch.accelerator.max_memory_reserved() == torch.cuda.max_memory_reserved()
    del x
    torch.accelerator.empty_cache()
    assert torch.accelerator.memory_reserved() == torch.cuda.memory_reserved()
    torch.accelerator.reset_peak_memory_stats()
    assert torch.accelerator.max_memory_allocated() == torch.cuda.memory_allocated()
    y.fill_(2.0)
    assert y.sum().item() == 600.0


if __name__ == "__main__":
    main()
