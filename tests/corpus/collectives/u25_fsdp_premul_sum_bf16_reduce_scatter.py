"""bf16 gradient reduce-scatter with the pre-division folded into the collective: ReduceOp.PREMUL_SUM with factor
1/world (`dist._make_nccl_premul_sum`), then the same with a tensor factor on fp32; the program asserts the intended
values, and on a GPU with torch <= 2.11 the bf16 one comes back all zeros.

EXPECTED: error
ERROR: AssertionError|UnsupportedOperation
MODELLED ON: FSDP2's gradient reduce-scatter (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py
`_get_gradient_divide_factors` / `_div_if_needed`: for NCCL it uses `ReduceOp.PREMUL_SUM` via
`_make_nccl_premul_sum(1 / factor)` so the division happens inside the reduction).
REASON: ProcessGroupNCCL getNcclReduceOp hands NCCL the bf16 factor through unpackPreMulSum<float, ncclBfloat16>:
NCCL reads 2 bytes of the float, the low half, which is 0 for every power of two (pytorch/pytorch#190745, fixed by
pull #190747), so the bf16 reduce-scatter multiplies by 0. Measured on an H200 with torch 2.11 / NCCL 2.28
(docs/gpu/z-series-nccl-facts-2026-12-02.json, premul/bfloat16/*; notes zd1). Until zd1 simdist gave the intended
values and this program's verdict was `clean`; the fp32 tensor-factor half is right on both. Under a torch after
2.11 (not measured) simdist refuses the bf16 PREMUL_SUM by name: UnsupportedOperation.
"""
import os

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    n = 8 * world
    grad = (torch.arange(n, dtype=torch.float32) * (rank + 1)).to(torch.bfloat16).cuda()
    shard = torch.empty(8, dtype=torch.bfloat16, device="cuda")
    dist.reduce_scatter_tensor(shard, grad, op=dist._make_nccl_premul_sum(1.0 / world))
    full = torch.arange(n, dtype=torch.float32) * sum(r + 1 for r in range(world)) / world
    assert torch.equal(shard.float().cpu(), full[8 * rank:8 * rank + 8]), shard
    g32 = torch.full((4,), 3.0 * (rank + 1), device="cuda")
    factor = torch.tensor(0.5, device="cuda")
    dist.all_reduce(g32, op=dist._make_nccl_premul_sum(factor))
    assert torch.equal(g32.cpu(), torch.full((4,), 0.5 * 3.0 * sum(r + 1 for r in range(world))))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
