"""Megatron sequence parallelism: _reduce_scatter_along_first_dim and _gather_along_first_dim (reduce_scatter_tensor /
all_gather_into_tensor along dim 0), plus _gather_along_last_dim (gather along dim 0, then cat of the chunks on dim -1).

EXPECTED: clean
WORLD_SIZE: 4
MODELLED ON: megatron/core/tensor_parallel/mappings.py `_reduce_scatter_along_first_dim`, `_gather_along_first_dim`,
`_gather_along_last_dim` (dist.reduce_scatter_tensor / dist.all_gather_into_tensor with async_op=False into a fresh
torch.empty output).
REASON: with async_op=False a collective is ordered on the current stream (torch.distributed docs, "Synchronous and
asynchronous collective operations": the collective is enqueued and the current stream waits for it), so the
following ops on the current stream read the finished output. Values follow from the definitions.
"""
import os
import torch
import torch.distributed as dist


def reduce_scatter_along_first_dim(x):
    world = dist.get_world_size()
    dim_size = list(x.size())
    dim_size[0] = dim_size[0] // world
    out = torch.empty(dim_size, dtype=x.dtype, device=torch.cuda.current_device())
    dist.reduce_scatter_tensor(out, x.contiguous())
    return out


def gather_along_first_dim(x):
    world = dist.get_world_size()
    dim_size = list(x.size())
    dim_size[0] = dim_size[0] * world
    out = torch.empty(dim_size, dtype=x.dtype, device=torch.cuda.current_device())
    dist.all_gather_into_tensor(out, x.contiguous())
    return out


def gather_along_last_dim(x):
    world = dist.get_world_size()
    g = gather_along_first_dim(x)
    return torch.cat(g.chunk(world, dim=0), dim=-1).contiguous()


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    S, B, H = 8, 2, 3
    full = [torch.randn(S, B, H, generator=torch.Generator().manual_seed(100 + r)) for r in range(world)]
    x = full[rank].cuda() * 1.0
    rs = reduce_scatter_along_first_dim(x)
    exp_sum = sum(full)
    chunk = S // world
    assert torch.allclose(rs.cpu(), exp_sum[rank * chunk:(rank + 1) * chunk], atol=1e-5)
    y = torch.tanh(rs)                              # per-rank sequence shard compute
    g = gather_along_first_dim(y)
    assert torch.allclose(g.cpu(), torch.tanh(exp_sum), atol=1e-5)
    part = (torch.arange(6, dtype=torch.float32).reshape(2, 3) + 10 * rank).cuda()
    last = gather_along_last_dim(part)
    exp_last = torch.cat([torch.arange(6, dtype=torch.float32).reshape(2, 3) + 10 * r for r in range(world)], dim=-1)
    assert torch.equal(last.cpu(), exp_last), last.cpu()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
