"""A conv weight gradient in channels_last layout (non-contiguous in the default format, contiguous in its
suggested one) all-reduced directly: ProcessGroupNCCL accepts it and NCCL reduces its bytes in memory order, which is
element-wise the same reduction; the layout is kept.

EXPECTED: clean
MODELLED ON: channels_last training (torch docs, "(beta) Channels Last Memory Format": `model.to(memory_format=
torch.channels_last)`) with a hand-written gradient all-reduce over `p.grad` (as in torch DDP's fallback path or
simple data-parallel loops) on conv weights whose grads keep the channels_last strides.
REASON: ProcessGroupNCCL.cpp check_gpu_single_tensor accepts `tensor.is_contiguous(tensor.suggest_memory_format())`
(channels_last here); the all_reduce is element-wise, so memory order does not change the result. Values: CPU sums.
"""
import os

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    base = torch.arange(2 * 3 * 4 * 5, dtype=torch.float32).reshape(2, 3, 4, 5)
    g = (base * (rank + 1)).cuda().to(memory_format=torch.channels_last)
    assert not g.is_contiguous() and g.is_contiguous(memory_format=torch.channels_last)
    dist.all_reduce(g)
    assert g.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(g.cpu(), base * sum(range(1, world + 1)))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
