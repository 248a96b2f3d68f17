"""torch.compile of a function that calls dist.all_reduce in the middle (dynamo traces the c10d call as a functional
collective, or graph-breaks around it): the compiled function's values match eager math on every rank, or the
simulator refuses compiled code by name.

EXPECTED: clean-or-error
ERROR: UnsupportedOperation
MODELLED ON: compiled tensor-parallel blocks that keep an explicit `dist.all_reduce(out, group=tp_group)` inside the
compiled region (torchtitan's compiled TP MLP before DTensor; torch docs "torch.compile and distributed": c10d
collectives are traced into `_c10d_functional` ops).
REASON: torch/_dynamo/variables/distributed.py maps `dist.all_reduce` inside a compiled region to
`torch.distributed._functional_collectives` (all_reduce_inplace + wait_tensor); the collective's semantics are the
eager ones. Values: (1 * 2) summed over ranks, + 1.
"""
import os

import torch
import torch.distributed as dist


def main():
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl")
    world = dist.get_world_size()

    @torch.compile
    def block(x):
        y = x * 2
        dist.all_reduce(y)
        return y + 1

    out = block(torch.ones(16, device="cuda"))
    assert torch.equal(out.cpu(), torch.full((16,), 2.0 * world + 1))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
