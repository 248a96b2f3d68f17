"""all_reduce of complex64 tensors (SUM, AVG), all_gather_into_tensor of complex; MAX on a complex tensor refused
by torch.distributed before it reaches NCCL.

EXPECTED: clean
WORLD_SIZE: 2
MODELLED ON: spectral / FFT-based model code reducing complex gradients.
REASON: torch/distributed/distributed_c10d.py all_reduce: complex tensors are reduced as view_as_real
("if tensor.is_complex(): if not supports_complex(op): raise ValueError(f'all_reduce does not support {op} on
complex tensors'); tensor = torch.view_as_real(tensor)"); SUM / AVG of the real and imaginary parts.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    base = torch.tensor([1 + 2j, -3 + 0.5j, 4j], dtype=torch.complex64)
    z = (base * (rank + 1)).cuda()
    dist.all_reduce(z)
    s = sum(range(1, world + 1))
    assert torch.allclose(z.cpu(), base * s), z.cpu()
    a = (base * (rank + 1)).cuda()
    dist.all_reduce(a, op=dist.ReduceOp.AVG)
    assert torch.allclose(a.cpu(), base * s / world)
    out = torch.empty(3 * world, dtype=torch.complex64, device="cuda")
    dist.all_gather_into_tensor(out, (base + rank).cuda())
    assert torch.allclose(out.cpu(), torch.cat([base + r for r in range(world)]))
    try:
        dist.all_reduce(z, op=dist.ReduceOp.MAX)
    except ValueError as e:
        assert "complex" in str(e), e
    else:
        raise AssertionError("MAX on a complex tensor was accepted")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
