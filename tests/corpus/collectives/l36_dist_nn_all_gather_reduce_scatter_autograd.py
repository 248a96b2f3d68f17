"""torch.distributed.nn.functional all_gather (list form) and reduce_scatter with autograd: the all_gather's backward
reduce-scatters the output gradients, the reduce_scatter's backward all-gathers; gradients checked against the
definitions.

EXPECTED: clean
WORLD_SIZE: 2
MODELLED ON: torch/distributed/nn/functional.py `all_gather` (`_AllGather.backward`: reduce_scatter of the
gradients, SUM) and `reduce_scatter` (`_Reduce_Scatter.backward`: all_gather), used for contrastive losses
(CLIP-style gathering of embeddings with gradients).
REASON: the collectives are synchronous on the current stream (torch.distributed docs, async_op=False); the
gradient of rank r's input of an all_gather is the sum over ranks of the gradient of output r.
"""
import os
import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dnnf


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    x = (torch.arange(4, dtype=torch.float32) + 10 * rank).cuda().requires_grad_(True)
    outs = dnnf.all_gather(x)
    # loss on rank k: sum_j (j + 1 + k) * outs[j]
    loss = sum((j + 1 + rank) * o.sum() for j, o in enumerate(outs))
    loss.backward()
    # d/dx_r = sum_k (r + 1 + k)
    exp = float(sum(rank + 1 + k for k in range(world)))
    assert torch.all(x.grad.cpu() == exp).item(), x.grad.cpu()

    ins = [(torch.full((3,), float(rank + j))).cuda().requires_grad_(True) for j in range(world)]
    out = torch.empty(3, device="cuda")
    rs = dnnf.reduce_scatter(out, ins)
    assert torch.all(rs.detach().cpu() == float(sum(r + rank for r in range(world)))).item()
    (rs * (rank + 1)).sum().backward()
    for j, t in enumerate(ins):
        assert torch.all(t.grad.cpu() == float(j + 1)).item(), (j, t.grad.cpu())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
