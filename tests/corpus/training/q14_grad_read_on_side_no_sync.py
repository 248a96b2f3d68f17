"""backward() on the default stream, then p.grad read on a side stream without any synchronization.

EXPECTED: hazard
KINDS: read-after-write
REASON: CUDA semantics, stream semantics of backward passes: grads are produced on the stream current at backward(); using them on another stream needs wait_stream.
"""
import os
import torch
import torch.nn as nn
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    torch.manual_seed(0)
    model = nn.Linear(512, 512).cuda()
    model(torch.randn(128, 512, device="cuda")).square().mean().backward()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):                   # BUG: no side.wait_stream(current)
        norm = model.weight.grad.norm()
    torch.cuda.current_stream().wait_stream(side)
    print(norm.item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
