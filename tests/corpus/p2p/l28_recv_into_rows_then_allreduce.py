"""A pipeline stage receives micro-batch activations into rows of one preallocated buffer (irecv into slices, all
waited), then all-reduces the whole buffer over its data-parallel group and reads it; world 4: pipeline pairs
(0 -> 1), (2 -> 3), data-parallel groups {0, 2}, {1, 3}.

EXPECTED: clean
WORLD_SIZE: 4
MODELLED ON: Megatron's pipeline receive buffers (recv_prev into a preallocated tensor) with a data-parallel
all-reduce afterwards (embedding-gradient all-reduce between first and last stages).
REASON: each irecv's req.wait() orders the current stream after it; the synchronous all_reduce issued next waits for
the current stream (ProcessGroupNCCL syncs the NCCL stream with the current stream at issue), so it reads every
received row.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dp_groups = [dist.new_group([0, 2]), dist.new_group([1, 3])]
    R, C = 4, 1024
    if rank % 2 == 0:
        reqs = [dist.isend(torch.full((C,), float(10 * rank + m), device="cuda"), dst=rank + 1) for m in range(R)]
        for r in reqs:
            r.wait()
        dist.barrier(group=dp_groups[0])
    else:
        buf = torch.zeros(R, C, device="cuda")
        reqs = [dist.irecv(buf[m], src=rank - 1) for m in range(R)]
        for r in reqs:
            r.wait()
        dist.all_reduce(buf, group=dp_groups[1])
        exp = torch.stack([torch.full((C,), float(0 + m) + float(20 + m)) for m in range(R)])
        assert torch.equal(buf.cpu(), exp), buf.cpu()[:, 0]
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
