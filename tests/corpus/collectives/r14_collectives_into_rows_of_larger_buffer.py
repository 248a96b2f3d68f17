"""all_gather_into_tensor into a row of a 2-D buffer and reduce_scatter_tensor into a slice of a flat buffer; neighbouring bytes stay untouched.

EXPECTED: clean
WORLD_SIZE: 3
REASON: contiguous views are valid collective buffers; a collective writes exactly its view's bytes; sync collectives are ordered on the current stream.
"""
import os
import torch
import torch.distributed as dist

N = 1000


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    world = dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    big = torch.full((3, world * N), -1.0, device="cuda")
    x = torch.arange(N, device="cuda", dtype=torch.float32) + 100.0 * rank
    dist.all_gather_into_tensor(big[1], x)
    exp_row = torch.cat([torch.arange(N, dtype=torch.float32) + 100.0 * r for r in range(world)])
    b = big.cpu()
    assert torch.equal(b[1], exp_row)
    assert torch.all(b[0] == -1).item() and torch.all(b[2] == -1).item()

    flat = torch.full((5 * N,), -2.0, device="cuda")
    src = torch.arange(world * N, device="cuda", dtype=torch.float32) * (rank + 1)
    dist.reduce_scatter_tensor(flat[2 * N:3 * N], src)
    tot = float(sum(range(1, world + 1)))
    exp = (torch.arange(world * N, dtype=torch.float32) * tot)[rank * N:(rank + 1) * N]
    f = flat.cpu()
    assert torch.equal(f[2 * N:3 * N], exp)
    assert torch.all(f[:2 * N] == -2).item() and torch.all(f[3 * N:] == -2).item()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
