"""Pinned staging tensors are created, used for a non_blocking H2D copy, dropped, and new pinned tensors filled, in a loop.

EXPECTED: clean
REASON: PyTorch's caching host allocator records an event on each non_blocking copy and does not hand a pinned block out again until it completes.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    outs = []
    for i in range(6):
        stage = torch.empty(1 << 14, pin_memory=True)
        stage.fill_(float(i))
        outs.append(stage.to("cuda", non_blocking=True))
        del stage                           # returned to the caching host allocator
    torch.cuda.synchronize()
    got = [o[0].item() for o in outs] + [o.sum().item() for o in outs]
    assert got == [float(i) for i in range(6)] + [float(i * (1 << 14)) for i in range(6)], got
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
