"""Dropout(p=0.5) in train mode on cuda: outputs are 0 or 2x, backward grad equals the mask * 2, the same
manual_seed reproduces the mask, eval() is identity.

EXPECTED: clean
REASON: single stream; dropout semantics (inverted dropout scaling 1/(1-p)).
"""
import os
import torch
import torch.nn as nn
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    drop = nn.Dropout(0.5).train()
    x = (torch.rand(4096) + 1).cuda().requires_grad_()
    torch.manual_seed(5)
    y = drop(x)
    y.sum().backward()
    yc, xc, gc = y.detach().cpu(), x.detach().cpu(), x.grad.cpu()
    kept = yc != 0
    assert torch.allclose(yc[kept], 2 * xc[kept])
    assert 1500 < kept.sum().item() < 2600, kept.sum()
    assert torch.equal(gc, kept.float() * 2)
    torch.manual_seed(5)
    y2 = drop(x.detach())
    assert torch.equal(y2.cpu() != 0, kept)
    assert torch.equal(drop.eval()(x.detach()).cpu(), xc)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
