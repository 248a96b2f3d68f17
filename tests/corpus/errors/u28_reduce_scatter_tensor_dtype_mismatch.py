"""reduce_scatter_tensor of a float32 gradient buffer into a bf16 shard: ProcessGroupNCCL refuses mixed dtypes
with a TypeError (no implicit cast in the collective).

EXPECTED: error
ERROR: TypeError
MODELLED ON: mixed-precision gradient reduction where the reduce dtype of the buffer (fp32 accumulation) and the
dtype of the shard the optimizer reads (bf16 main grads) drift apart (Megatron `grad_reduce_in_fp32`, FSDP2
MixedPrecisionPolicy(reduce_dtype=...)).
REASON: torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp _reduce_scatter_base: `if (inputTensor.dtype() !=
outputTensor.dtype()) { C10_THROW_ERROR(TypeError, "input tensor must be the same type as the output tensor."); }`.
"""
import os

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    world = dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    grad_buffer = torch.ones(1024 * world, device="cuda")                    # float32
    shard = torch.empty(1024, dtype=torch.bfloat16, device="cuda")
    dist.reduce_scatter_tensor(shard, grad_buffer)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
