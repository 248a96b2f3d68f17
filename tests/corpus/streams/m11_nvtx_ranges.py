"""NVTX annotations as training loops use them (Megatron's nvtx_range_push/pop, torch.cuda.nvtx.range context,
range_start/range_end handles, mark): no effect on values or ordering.

EXPECTED: clean
WORLD_SIZE: 1
REASON: torch/cuda/nvtx.py: range_push/range_pop/range_start/range_end/mark only annotate the profiler timeline.
"""
import torch


def main():
    torch.cuda.set_device(0)
    a = torch.randn(32, 32)
    depth = torch.cuda.nvtx.range_push("step")
    with torch.cuda.nvtx.range("forward"):
        y = a.cuda() @ a.cuda()
    handle = torch.cuda.nvtx.range_start("backward")
    z = y * 2
    torch.cuda.nvtx.range_end(handle)
    torch.cuda.nvtx.mark("done")
    torch.cuda.nvtx.range_pop()
    assert torch.allclose(z.cpu(), a @ a * 2, atol=1e-4)


if __name__ == "__main__":
    main()
