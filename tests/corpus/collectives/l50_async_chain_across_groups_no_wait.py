"""Two async collectives chained across process groups: the TP all-reduce (group A) is issued async, and the DP
all-gather (group B) of its result is issued before the all-reduce is waited; only the all-gather is waited.

EXPECTED: hazard
KINDS: read-after-write
WORLD_SIZE: 4
MODELLED ON: 2-D parallel code overlapping a tensor-parallel reduction with a data-parallel gather (TP x DP
gradient or activation pipelines) that waits only the last handle.
REASON: each process group has its own NCCL stream, which at issue waits only for the current stream
(ProcessGroupNCCL syncStream: the NCCL stream waits an event recorded on the current stream); group B's stream is
not ordered after group A's all-reduce, so the all-gather may read the tensor before it is reduced (torch.distributed
docs, async_op=True: the output is usable after work.wait()).
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    tp_groups = [dist.new_group([0, 1]), dist.new_group([2, 3])]
    dp_groups = [dist.new_group([0, 2]), dist.new_group([1, 3])]
    tp, dp = tp_groups[rank // 2], dp_groups[rank % 2]
    x = torch.full((1 << 14,), float(rank + 1), device="cuda")
    a = dist.all_reduce(x, group=tp, async_op=True)
    out = torch.empty(2 * x.numel(), device="cuda")
    b = dist.all_gather_into_tensor(out, x, group=dp, async_op=True)   # BUG: a.wait() first
    b.wait()
    a.wait()
    print(out[0].item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
