"""torch.autocast("cuda", dtype=torch.bfloat16): Linear output is bf16 (autocast op list), backward gives fp32 grads
on fp32 params; values close to an fp32 CPU reference.

EXPECTED: clean
REASON: single stream; autocast semantics (https://pytorch.org/docs/stable/amp.html: linear/matmul autocast to the lower dtype).
"""
import copy
import os
import torch
import torch.nn as nn
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    torch.manual_seed(2)
    ref = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8))
    gpu = copy.deepcopy(ref).cuda()
    x = torch.randn(16, 32)
    ref(x).float().pow(2).mean().backward()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        h = gpu[0](x.cuda())
        assert h.dtype == torch.bfloat16, h.dtype
        y = gpu[2](gpu[1](h))
        assert y.dtype == torch.bfloat16, y.dtype
        loss = y.float().pow(2).mean()
    loss.backward()
    for p, q in zip(ref.parameters(), gpu.parameters()):
        assert q.grad.dtype == torch.float32
        rel = (p.grad - q.grad.cpu()).norm() / p.grad.norm()
        assert rel < 0.05, rel
    with torch.autocast("cuda", enabled=False):
        assert gpu[0](x.cuda()).dtype == torch.float32
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
