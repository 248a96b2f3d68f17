"""torch.compile of a small function applied to cuda tensors: either refused with UnsupportedOperation or
correct values (vs eager CPU) with no hazard.

EXPECTED: clean-or-error
ERROR: UnsupportedOperation
REASON: the simulator must not silently compute wrong values for compiled code.
"""
import os
import torch
import torch.distributed as dist


def f(x, y):
    return torch.relu(x @ y) * 2 + x.sum()


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    cf = torch.compile(f)
    out = cf(a.cuda(), b.cuda())
    assert torch.allclose(out.cpu(), f(a, b), atol=1e-4), (out.cpu() - f(a, b)).abs().max()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
