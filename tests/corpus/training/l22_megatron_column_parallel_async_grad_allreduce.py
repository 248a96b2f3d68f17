"""Megatron's ColumnParallelLinear backward with the input-gradient all-reduce overlapped with the weight-gradient
matmul (custom autograd.Function: all_reduce(grad_input, async_op=True), grad_weight = grad_output^T x,
handle.wait(), return); gradients checked against one process.

EXPECTED: clean
WORLD_SIZE: 2
MODELLED ON: megatron/core/tensor_parallel/layers.py `LinearWithGradAccumulationAndAsyncCommunication.backward`
(`handle = torch.distributed.all_reduce(grad_input, group=tp_group, async_op=True)`, the grad_weight matmul, then
`handle.wait()` before returning grad_input when sequence parallelism is off).
REASON: work.wait() makes the current stream (autograd's, where the next node consumes grad_input) wait for the
all-reduce (torch.distributed docs, async_op=True).
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
        handle = dist.all_reduce(grad_input, async_op=True)
        grad_weight = grad_output.t() @ x             # overlapped with the all-reduce
        handle.wait()
        return grad_input, grad_weight


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    g = torch.Generator().manual_seed(4)
    H, F = 8, 12
    w_full = torch.randn(F, H, generator=g)
    w0 = torch.randn(H, H, generator=g)
    x = torch.randn(4, H, generator=g)
    pre = torch.nn.Linear(H, H, bias=False).cuda()
    with torch.no_grad():
        pre.weight.copy_(w0)
    shard = w_full.chunk(world, 0)[rank].cuda().requires_grad_(True)
    h = torch.tanh(pre(x.cuda()))
    y = ColumnParallelLinearFn.apply(h, shard)
    (y * y).sum().backward()                         # each rank: its columns' share of the loss

    rw0 = w0.clone().requires_grad_(True)
    rw = w_full.clone().requires_grad_(True)
    ((torch.tanh(x @ rw0.t()) @ rw.t()) ** 2).sum().backward()
    assert torch.allclose(shard.grad.cpu(), rw.grad.chunk(world, 0)[rank], atol=1e-4)
    assert torch.allclose(pre.weight.grad.cpu(), rw0.grad, atol=1e-4), (pre.weight.grad.cpu(), rw0.grad)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
