"""The buggy twin of l22: the custom ColumnParallelLinear backward returns grad_input while its async all-reduce is
still in flight (handle.wait() forgotten); autograd's next node (the tanh and the previous Linear) consumes it on
the current stream.

EXPECTED: hazard
KINDS: read-after-write
KINDS_ALSO: write-after-read
WORLD_SIZE: 2
MODELLED ON: megatron/core/tensor_parallel/layers.py `LinearWithGradAccumulationAndAsyncCommunication.backward`
with its `handle.wait()` removed (the wait Megatron does before returning grad_input).
REASON: with async_op=True the all-reduce runs on the NCCL stream; nothing orders autograd's current stream after it
without work.wait() (torch.distributed docs, "Synchronous and asynchronous collective operations").
"""
import os
import torch
import torch.distributed as dist


class ColumnParallelLinearFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight):
        ctx.save_for_backward(x, weight)
        return x @ weight.t()

    @staticmethod
    def backward(ctx, grad_output):
        x, weight = ctx.saved_tensors
        grad_input = grad_output @ weight
        ctx.handle = dist.all_reduce(grad_input, async_op=True)
        grad_weight = grad_output.t() @ x
        return grad_input, grad_weight               # BUG: no ctx.handle.wait()


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    g = torch.Generator().manual_seed(4)
    H, F = 256, 256
    pre = torch.nn.Linear(H, H, bias=False).cuda()
    shard = (torch.randn(F, H, generator=g).chunk(world, 0)[rank]).cuda().requires_grad_(True)
    h = torch.tanh(pre(torch.randn(64, H, generator=g).cuda()))
    y = ColumnParallelLinearFn.apply(h, shard)
    (y * y).sum().backward()
    print(pre.weight.grad.sum().item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
