"""The documented pattern: forward on default; `s.wait_stream(default)`; `with torch.cuda.stream(s): loss.backward();
use grads on s`; then default waits on s and steps; vs CPU.

EXPECTED: clean
REASON: CUDA semantics, stream semantics of backward passes (the 'safe' example of the notes).
"""
import copy
import os
import torch
import torch.nn as nn
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    torch.manual_seed(6)
    ref = nn.Sequential(nn.Linear(16, 16), nn.SiLU(), nn.Linear(16, 16))
    gpu = copy.deepcopy(ref).cuda()
    x = torch.randn(4, 16)
    ref(x).pow(2).sum().backward()
    s = torch.cuda.Stream()
    loss = gpu(x.cuda()).pow(2).sum()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        loss.backward()
        gn = torch.stack([p.grad.norm() for p in gpu.parameters()]).sum()
    torch.cuda.current_stream().wait_stream(s)
    for p in gpu.parameters():
        p.grad.mul_(0.5)
    rn = torch.stack([p.grad.norm() for p in ref.parameters()]).sum()
    assert abs(gn.item() - rn.item()) < 1e-3 * rn.item(), (gn, rn)
    for p, q in zip(ref.parameters(), gpu.parameters()):
        assert torch.allclose(p.grad * 0.5, q.grad.cpu(), atol=1e-5)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
