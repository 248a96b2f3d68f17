"""all_reduce and reduce_scatter_tensor with PREMUL_SUM built by dist._make_nccl_premul_sum(factor).

EXPECTED: clean
REASON: PREMUL_SUM multiplies each rank's input by the factor before summing (NCCL ncclRedOpCreatePreMulSum; torch's _make_nccl_premul_sum).
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    world = dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    x = torch.full((64,), float(rank + 1), device="cuda")
    dist.all_reduce(x, op=dist._make_nccl_premul_sum(0.5))
    assert torch.all(x == 0.5 * sum(range(1, world + 1))).item(), x[0].item()
    inp = torch.arange(world * 4, device="cuda", dtype=torch.float32)
    out = torch.empty(4, device="cuda")
    dist.reduce_scatter_tensor(out, inp, op=dist._make_nccl_premul_sum(2.0))
    exp = (torch.arange(world * 4, dtype=torch.float32) * 2.0 * world)[rank * 4:(rank + 1) * 4]
    assert torch.equal(out.cpu(), exp)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
