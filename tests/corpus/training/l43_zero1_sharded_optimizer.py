"""ZeRO-1 / distributed-optimizer step by hand: a flat gradient buffer reduce-scattered (AVG) to each rank's
shard, Adam on the fp32 master shard, the updated shards all-gathered into the flat parameter buffer that the model's
parameters view; three steps checked against plain Adam on the averaged gradients.

EXPECTED: clean
WORLD_SIZE: 2
MODELLED ON: megatron/core/optimizer/distrib_optimizer.py (reduce-scatter of grad buffers, step on the shard,
all-gather of the param buffer) and DeepSpeed ZeRO stage 1, without overlap.
REASON: synchronous collectives are ordered on the current stream (torch.distributed docs); Adam is elementwise, so
the step on shards equals the step on the whole.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    torch.manual_seed(12)
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3)).cuda()
    ref = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3))
    ref.load_state_dict({k: v.cpu() for k, v in model.state_dict().items()})
    params = list(model.parameters())
    numel = sum(p.numel() for p in params)
    padded = (numel + world - 1) // world * world
    flat_param = torch.zeros(padded, device="cuda")
    flat_grad = torch.zeros(padded, device="cuda")
    off = 0
    for p in params:                                  # parameters and grads become views of the flat buffers
        n = p.numel()
        flat_param[off:off + n].copy_(p.detach().flatten())
        p.data = flat_param[off:off + n].view_as(p)
        p.grad = flat_grad[off:off + n].view_as(p)
        off += n
    shard_n = padded // world
    master = flat_param[rank * shard_n:(rank + 1) * shard_n].clone().requires_grad_(True)
    opt = torch.optim.Adam([master], lr=1e-2)
    ref_opt = torch.optim.Adam(ref.parameters(), lr=1e-2)
    for step in range(3):
        xs = [torch.randn(4, 6, generator=torch.Generator().manual_seed(9 * step + r)) for r in range(world)]
        flat_grad.zero_()
        model(xs[rank].cuda()).square().mean().backward()
        gshard = torch.empty(shard_n, device="cuda")
        dist.reduce_scatter_tensor(gshard, flat_grad, op=dist.ReduceOp.AVG)
        master.grad = gshard
        opt.step()
        dist.all_gather_into_tensor(flat_param, master.detach())
        (sum(ref(x).square().mean() for x in xs) / world).backward()
        ref_opt.step()
        ref_opt.zero_grad()
    for p, q in zip(model.parameters(), ref.parameters()):
        assert torch.allclose(p.detach().cpu(), q.detach(), atol=1e-5), (p, q)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
