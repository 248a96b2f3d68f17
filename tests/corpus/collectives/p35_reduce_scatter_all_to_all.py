"""reduce_scatter_tensor followed by all_to_all_single with uneven splits; check values.

EXPECTED: clean
REASON: synchronous collectives in sequence on the default stream.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    world = dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    inp = torch.arange(world * 4, dtype=torch.float32, device="cuda") * (rank + 1)
    out = torch.empty(4, device="cuda")
    dist.reduce_scatter_tensor(out, inp)
    coef = sum(r + 1 for r in range(world))
    assert out.tolist() == [float((rank * 4 + j) * coef) for j in range(4)], out.tolist()
    # all_to_all_single: rank r sends (j+1) elements to rank j, each valued 100*r + j
    in_splits = [j + 1 for j in range(world)]
    send = torch.cat([torch.full((j + 1,), 100.0 * rank + j, device="cuda") for j in range(world)])
    out_splits = [rank + 1] * world
    recv = torch.empty(sum(out_splits), device="cuda")
    dist.all_to_all_single(recv, send, output_split_sizes=out_splits, input_split_sizes=in_splits)
    expect = []
    for src in range(world):
        expect += [100.0 * src + rank] * (rank + 1)
    assert recv.tolist() == expect, (recv.tolist(), expect)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
