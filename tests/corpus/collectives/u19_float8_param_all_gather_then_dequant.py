"""FP8 weight all-gather: each rank casts its weight shard to float8_e4m3fn with a per-tensor scale, all-gathers the
fp8 bytes (all_gather_into_tensor) and the scales (all_gather), and dequantizes the full weight: no arithmetic in
the collective, so the result is exactly the dequantization of every rank's shard.

EXPECTED: clean
MODELLED ON: torchao's float8 FSDP all-gather (`WeightWithDynamicFloat8CastTensor.fsdp_pre_all_gather` casts to
float8 and all-gathers the uint8/fp8 data, `fsdp_post_all_gather` rebuilds with the scale) and TE's FP8 parameter
all-gather in Megatron (`_all_gather_fp8`).
REASON: ProcessGroupNCCL maps float8 dtypes to NCCL types for data movement (all_gather / broadcast move bytes);
only reductions of float8 are restricted (ProcessGroupNCCL.cpp allreduce: "Float8 dtypes are not currenlty
supported for NCCL reductions"). Values: eager CPU casts of the same shards.
"""
import os

import torch
import torch.distributed as dist

ROWS, COLS = 16, 32


def shard_of(r):
    g = torch.Generator().manual_seed(1234 + r)
    return torch.randn(ROWS, COLS, generator=g) * (r + 1)


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    w = shard_of(rank).cuda()
    scale = 448.0 / w.abs().max()
    w8 = (w * scale).to(torch.float8_e4m3fn)
    full8 = torch.empty(world * ROWS, COLS, dtype=torch.float8_e4m3fn, device="cuda")
    dist.all_gather_into_tensor(full8, w8)
    scales = [torch.empty((), device="cuda") for _ in range(world)]
    dist.all_gather(scales, scale.reshape(()))
    full = torch.cat([full8[i * ROWS:(i + 1) * ROWS].float() / scales[i] for i in range(world)])
    want = []
    for r in range(world):
        s = shard_of(r)
        sc = 448.0 / s.abs().max()
        want.append((s * sc).to(torch.float8_e4m3fn).float() / sc)
    assert torch.equal(full.cpu(), torch.cat(want))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
