"""The fix of l50: the TP all-reduce's work is waited (the current stream waits for group A's stream) before the DP
all-gather is issued, whose NCCL stream then waits for the current stream; values checked.

EXPECTED: clean
WORLD_SIZE: 4
MODELLED ON: the same TP x DP chain with the handles waited in order.
REASON: work.wait() makes the current stream wait for group A's all-reduce; issuing on group B makes B's NCCL stream
wait for the current stream (ProcessGroupNCCL syncStream), so the order is transitive.
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
    a.wait()
    out = torch.empty(2 * x.numel(), device="cuda")
    b = dist.all_gather_into_tensor(out, x, group=dp, async_op=True)
    b.wait()
    tp_sums = [1.0 + 2.0, 3.0 + 4.0]                 # ranks (0, 1) and (2, 3), values rank + 1
    exp = torch.cat([torch.full((1 << 14,), tp_sums[0]), torch.full((1 << 14,), tp_sums[1])])
    assert torch.equal(out.cpu(), exp), out.cpu()[[0, -1]]
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
