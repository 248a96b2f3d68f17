"""Rank 0 puts its cuda tensor in a process-wide shared module (the rank threads share sys.modules); after a barrier,
rank 1 uses rank 0's tensor in its own kernel. Impossible across real torchrun processes: must be refused. (Run with
the thread transport, where the ranks do share sys.modules; as processes the module is simply not shared.)

EXPECTED: error
ERROR: SimulationError
TRANSPORT: threads
REASON: a rank can only touch its own GPU's memory; silently computing with another rank's bytes would hide bugs.
"""
import os
import sys
import types
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    shared = sys.modules.setdefault("_q50_shared", types.ModuleType("_q50_shared"))
    if rank == 0:
        shared.t = torch.full((256,), 3.0, device="cuda")
    dist.barrier()
    mine = torch.ones(256, device="cuda")
    if rank == 1:
        mine.add_(shared.t)                # another rank's device memory
        print(mine.sum().item())
    dist.barrier()
    if rank == 0:
        del shared.t
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
