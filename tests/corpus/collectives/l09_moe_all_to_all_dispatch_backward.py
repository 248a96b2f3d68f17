"""MoE token dispatch: tokens routed to the expert on each rank by uneven all_to_all_single (split sizes exchanged
first with an all_to_all_single of counts), the local expert (a Linear), the combine all_to_all back, and the
backward through torch.distributed.nn.functional.all_to_all_single; output and gradients checked against one
process computing every expert.

EXPECTED: clean
WORLD_SIZE: 2
MODELLED ON: megatron/core/transformer/moe/token_dispatcher.py `MoEAlltoAllTokenDispatcher` (input_splits /
output_splits from a counts all_to_all, `all_to_all(group, input, output_split_sizes, input_split_sizes)` in
megatron/core/tensor_parallel/mappings.py `_AllToAll`: backward is the all_to_all with the splits swapped), here with
torch's autograd-enabled torch.distributed.nn.functional.all_to_all_single.
REASON: synchronous all_to_all_single is ordered on the current stream (torch.distributed docs, async_op=False);
torch/distributed/nn/functional.py `_AlltoAllSingle.backward` runs the all_to_all with the split sizes swapped.
"""
import os
import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dnnf


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    H, T = 4, 5
    g = torch.Generator().manual_seed(3)
    experts_w = [torch.randn(H, H, generator=g) for _ in range(world)]
    tokens = [torch.randn(T, H, generator=g) for _ in range(world)]
    routes = [torch.tensor([0, 1, 1, 0, 1]), torch.tensor([1, 1, 1, 0, 1])]
    expert = torch.nn.Linear(H, H, bias=False).cuda()
    with torch.no_grad():
        expert.weight.copy_(experts_w[rank])

    x = tokens[rank].cuda().requires_grad_(True)
    route = routes[rank].cuda()
    order = torch.argsort(route, stable=True)
    counts = torch.bincount(route, minlength=world)
    recv_counts = torch.empty_like(counts)
    dist.all_to_all_single(recv_counts, counts)
    in_splits = counts.tolist()
    out_splits = recv_counts.tolist()
    permuted = x[order]
    recv = dnnf.all_to_all_single(torch.empty(sum(out_splits), H, device="cuda"), permuted, out_splits, in_splits)
    y = expert(recv)
    back = dnnf.all_to_all_single(torch.empty(T, H, device="cuda"), y, in_splits, out_splits)
    out = torch.empty_like(back).index_copy(0, order, back)
    loss = (out * out).sum()
    loss.backward()

    # reference: every token through its routed expert, one process
    ref_x = [t.clone().requires_grad_(True) for t in tokens]
    ref_w = [w.clone().requires_grad_(True) for w in experts_w]
    ref_out = [torch.stack([ref_w[int(e)] @ ref_x[r][i] for i, e in enumerate(routes[r])]) for r in range(world)]
    sum((o * o).sum() for o in ref_out).backward()
    assert torch.allclose(out.detach().cpu(), ref_out[rank].detach(), atol=1e-5)
    assert torch.allclose(x.grad.cpu(), ref_x[rank].grad, atol=1e-4), (x.grad.cpu(), ref_x[rank].grad)
    assert torch.allclose(expert.weight.grad.cpu(), ref_w[rank].grad, atol=1e-4)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
