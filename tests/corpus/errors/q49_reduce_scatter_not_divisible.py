"""reduce_scatter_tensor with a 7-element input and a 3-element output at world size 2.

EXPECTED: error
ERROR: SimulationError|ValueError
REASON: ProcessGroupNCCL::_reduce_scatter_base: 'input tensor must be the same size as output size times world size' (ValueError).
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    inp = torch.arange(7, dtype=torch.float32, device="cuda")
    out = torch.empty(3, device="cuda")
    dist.reduce_scatter_tensor(out, inp)
    print(out.sum().item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
