"""Like q16 but p.grad.record_stream(side) before zero_grad(set_to_none=True); stash checked vs CPU replica.

EXPECTED: clean
REASON: record_stream defers reuse of the freed grad block until the side stream's work queued so far is done.
"""
import copy
import os
import torch
import torch.nn as nn
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    torch.manual_seed(0)
    ref = nn.Linear(64, 64, bias=False)
    model = copy.deepcopy(ref).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    opt_ref = torch.optim.SGD(ref.parameters(), lr=0.01)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        stash = torch.zeros(64, 64, device="cuda")
    stash_ref = torch.zeros(64, 64)
    g = torch.Generator().manual_seed(3)
    for step in range(3):
        x = torch.randn(16, 64, generator=g)
        ref(x).square().mean().backward()
        opt_ref.step()
        stash_ref += ref.weight.grad
        opt_ref.zero_grad(set_to_none=True)
        model(x.cuda()).square().mean().backward()
        opt.step()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            stash.add_(model.weight.grad)
        model.weight.grad.record_stream(side)
        opt.zero_grad(set_to_none=True)
    torch.cuda.current_stream().wait_stream(side)
    assert torch.allclose(stash.cpu(), stash_ref, atol=1e-5), (stash.cpu() - stash_ref).abs().max()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
