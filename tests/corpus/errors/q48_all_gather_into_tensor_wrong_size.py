"""all_gather_into_tensor with an output of world_size*n + 1 elements (same on every rank).

EXPECTED: error
ERROR: SimulationError|ValueError
REASON: ProcessGroupNCCL::_allgather_base: 'output tensor size must be equal to world_size times input tensor size' (ValueError).
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    inp = torch.full((100,), float(rank), device="cuda")
    out = torch.empty(world * 100 + 1, device="cuda")
    dist.all_gather_into_tensor(out, inp)
    print(out[:world * 100].sum().item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
