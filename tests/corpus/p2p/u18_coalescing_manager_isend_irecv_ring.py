"""A halo exchange written with `_coalescing_manager(group, device, async_ops=True)` around plain isend/irecv (every
rank sends to the right, then receives from the left, three neighbours' rows at once): the ops inside the block
are one NCCL group, so the order of sends and receives does not matter; `cm.wait()` orders the reads after them.

EXPECTED: clean
WORLD_SIZE: 3
MODELLED ON: torch/distributed/distributed_c10d.py batch_isend_irecv, which is exactly this
(`with _coalescing_manager(group, device, async_ops=True) as cm: for p2p_op in p2p_op_list: p2p_op.op(...)`;
`return cm.works`), used directly by pipeline schedules that post several P2Ps per step.
REASON: ProcessGroupNCCL::startCoalescing / endCoalescing bracket the calls with ncclGroupStart/ncclGroupEnd
("NCCL group semantics: the operations are issued together"; NCCL docs, Group Calls: sends and receives inside a
group may be posted in any order); the coalesced work's wait() makes the current stream wait.
"""
import os

import torch
import torch.distributed as dist
from torch.distributed.distributed_c10d import _coalescing_manager


def main():
    dist.init_process_group("nccl")
    r, n = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    device = torch.device("cuda", torch.cuda.current_device())
    halo_out = [torch.full((64,), 10.0 * r + k, device="cuda") for k in range(2)]
    halo_in = [torch.empty(64, device="cuda") for _ in range(2)]
    with _coalescing_manager(device=device, async_ops=True) as cm:
        for k in range(2):
            dist.isend(halo_out[k], (r + 1) % n)
            dist.irecv(halo_in[k], (r - 1) % n)
    cm.wait()
    left = (r - 1) % n
    for k in range(2):
        assert torch.equal(halo_in[k].cpu(), torch.full((64,), 10.0 * left + k)), (k, halo_in[k][:2])
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
