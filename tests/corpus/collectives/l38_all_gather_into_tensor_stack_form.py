"""all_gather_into_tensor with a stacked output (world, *input.shape) and reduce_scatter_tensor with a stacked input
(world, *output.shape), both accepted forms besides the concatenation along dim 0; a 2-D input's concatenation form.

EXPECTED: clean
WORLD_SIZE: 3
MODELLED ON: FSDP / ZeRO code gathering flat shards into a (world, shard) buffer.
REASON: torch.distributed docs, all_gather_into_tensor: "output_tensor ... must be correctly sized to have one of
the following forms: (i) a concatenation of all the input tensors along the primary dimension ... (ii) a stack of
all the input tensors along the primary dimension"; reduce_scatter_tensor: input "should have the same size across
all ranks ... (i) a concatenation of the output tensors along the primary dimension, or (ii) a stack".
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    inp = (torch.arange(6, dtype=torch.float32).reshape(2, 3) + 100 * rank).cuda()
    stacked = torch.empty(world, 2, 3, device="cuda")
    dist.all_gather_into_tensor(stacked, inp)
    exp = torch.stack([torch.arange(6, dtype=torch.float32).reshape(2, 3) + 100 * r for r in range(world)])
    assert torch.equal(stacked.cpu(), exp), stacked.cpu()
    cat = torch.empty(2 * world, 3, device="cuda")
    dist.all_gather_into_tensor(cat, inp)
    assert torch.equal(cat.cpu(), exp.reshape(2 * world, 3))

    rs_in = torch.stack([torch.full((2, 2), float(rank * 10 + j)) for j in range(world)]).cuda()
    rs_out = torch.empty(2, 2, device="cuda")
    dist.reduce_scatter_tensor(rs_out, rs_in)
    assert torch.all(rs_out.cpu() == float(sum(r * 10 + rank for r in range(world)))).item(), rs_out.cpu()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
