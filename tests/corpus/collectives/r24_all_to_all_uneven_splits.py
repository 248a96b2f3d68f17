"""all_to_all_single with uneven, rank-dependent split sizes, and list all_to_all with uneven tensors.

EXPECTED: clean
WORLD_SIZE: 3
REASON: rank r sends (r + j + 1) elements to rank j; output_split_sizes on j are (i + j + 1) for each source i; values follow from the split arithmetic.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    world = dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    in_splits = [rank + j + 1 for j in range(world)]
    out_splits = [i + rank + 1 for i in range(world)]
    chunks = [torch.full((in_splits[j],), 100.0 * rank + j) for j in range(world)]
    inp = torch.cat(chunks).cuda()
    out = torch.full((sum(out_splits),), -1.0, device="cuda")
    dist.all_to_all_single(out, inp, output_split_sizes=out_splits, input_split_sizes=in_splits)
    exp = torch.cat([torch.full((out_splits[i],), 100.0 * i + rank) for i in range(world)])
    assert torch.equal(out.cpu(), exp), out.cpu()

    ins = [torch.arange(j + 1, device="cuda", dtype=torch.int64) + 10 * rank for j in range(world)]
    outs = [torch.empty(rank + 1, device="cuda", dtype=torch.int64) for _ in range(world)]
    dist.all_to_all(outs, ins)
    for i in range(world):
        assert outs[i].tolist() == [k + 10 * i for k in range(rank + 1)], (i, outs[i].tolist())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
