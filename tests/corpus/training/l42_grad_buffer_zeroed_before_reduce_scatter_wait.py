"""Megatron-style contiguous gradient buffer: the reduce-scatter of the buffer is launched asynchronously at the end
of backward, and the next iteration's zero_grad_buffer() zeroes the buffer before the reduce-scatter is waited.

EXPECTED: hazard
KINDS: write-after-read
MODELLED ON: megatron/core/distributed/param_and_grad_buffer.py (`start_grad_sync`: reduce_scatter_tensor of the
bucket's grad_data with async_op=True; `finish_grad_sync`: the handle's wait; `reset`/`zero_grad_buffer`:
`grad_data.zero_()`), with finish_grad_sync skipped before the next iteration's zeroing.
REASON: the async reduce-scatter reads grad_data on the NCCL stream; zero_() on the current stream is ordered after
it only by handle.wait() (torch.distributed docs, async_op=True).
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    N = 1 << 15
    grad_data = torch.zeros(N, device="cuda")
    shard = torch.empty(N // world, device="cuda")
    handle = None
    for it in range(2):
        grad_data.zero_()                           # BUG at it=1: the previous reduce-scatter was not waited
        grad_data.add_(float(rank + it))            # "backward" accumulates into the buffer
        handle = dist.reduce_scatter_tensor(shard, grad_data, async_op=True)
    handle.wait()
    print(shard[0].item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
