"""Inductor-style generated code with a misplaced wait: `torch.ops._c10d_functional.all_reduce_` on a buffer, then
a kernel that reads the buffer, and only then `wait_tensor(buf)` (what a comm-reordering pass that sinks waits
past a use, or a hand-written overlap, produces). The read races the all-reduce's write.

EXPECTED: hazard
KINDS: read-after-write
WORLD_SIZE: 2
MODELLED ON: the output code torch.compile generates for a functional all-reduce (pytorch/pytorch issues 127324
and 152252: `torch.ops._c10d_functional.all_reduce_.default(buf0, 'avg', '0')` ...
`torch.ops._c10d_functional.wait_tensor.default(buf0)`), whose sink-waits passes move the wait "as late as
possible (i.e. until we reach a use)" (pull 108091); here the wait comes one use too late.
REASON: the functional op returns before the collective has run: its Work is registered against the buffer
(torch/csrc/distributed/c10d/Functional.cpp `all_reduce_` -> `c10d::register_work`) and only `wait_tensor` orders
the current stream after it; a kernel between the two reads the buffer unordered with the NCCL kernel's write.
The same program with the wait before the use is w06 (clean).
"""
import os

import torch
import torch.distributed as dist

fc = torch.ops._c10d_functional


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    name = dist.group.WORLD.group_name
    buf0 = torch.arange(1 << 12, dtype=torch.float32, device="cuda") + rank
    fc.all_reduce_(buf0, "avg", name)
    buf1 = buf0 * 2.0                              # BUG: a use before the wait
    fc.wait_tensor(buf0)
    out = buf0 + buf1
    torch.cuda.synchronize()
    print(rank, float(out[0]))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
