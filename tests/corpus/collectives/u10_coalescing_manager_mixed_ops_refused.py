"""An all_reduce and a reduce_scatter_tensor in one `_coalescing_manager` block: c10d refuses to coalesce
collectives of different types when the block ends.

EXPECTED: error
ERROR: RuntimeError
MODELLED ON: merging the gradient all-reduce of replicated parameters and the reduce-scatter of sharded ones into
one coalescing block (megatron-core param_and_grad_buffer.py keeps them in separate `_coalescing_manager` blocks).
REASON: torch/distributed/distributed_c10d.py `_coalescing_manager`: `if any(op.op is not op0 for op in op_list):
raise RuntimeError("Coalescing manager requires all collectives to be the same type, ...")`.
"""
import os

import torch
import torch.distributed as dist
from torch.distributed import _coalescing_manager


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    replicated = torch.ones(256, device="cuda")
    sharded_in = torch.ones(256 * world, device="cuda")
    sharded_out = torch.empty(256, device="cuda")
    with _coalescing_manager(async_ops=True) as cm:
        dist.all_reduce(replicated, async_op=True)
        dist.reduce_scatter_tensor(sharded_out, sharded_in, async_op=True)
    cm.wait()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
