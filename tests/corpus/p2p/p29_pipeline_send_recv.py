"""Two-stage pipeline: rank 0 runs stage 1 (Linear+GELU) and sends activations; rank 1 receives and runs stage 2.

EXPECTED: clean
REASON: synchronous send/recv run on the current stream (torch>=2.8); recv's output is ordered before later ops on that stream.
"""
import os
import torch
import torch.nn as nn
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    torch.manual_seed(42)
    stage1 = nn.Sequential(nn.Linear(32, 64), nn.GELU())
    stage2 = nn.Linear(64, 8)
    x_cpu = torch.randn(16, 32)
    with torch.no_grad():
        ref = stage2(stage1(x_cpu))
        if rank == 0:
            s1 = stage1.cuda()
            act = s1(x_cpu.cuda())
            dist.send(act, dst=1)
        elif rank == 1:
            s2 = stage2.cuda()
            act = torch.empty(16, 64, device="cuda")
            dist.recv(act, src=0)
            out = s2(act)
            assert torch.allclose(out.cpu(), ref, rtol=1e-4, atol=1e-5), (out.cpu() - ref).abs().max()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
