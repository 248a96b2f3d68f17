"""AdamW with gradient accumulation over 2 micro-batches (loss/2 each), zero_grad(set_to_none=True) per step, vs CPU.

EXPECTED: clean
REASON: single stream; .grad accumulation happens in backward on the current stream; optimizer default (foreach) path.
"""
import copy
import os
import torch
import torch.nn as nn
import torch.distributed as dist


def make():
    torch.manual_seed(3)
    return nn.Sequential(nn.Linear(12, 24), nn.ReLU(), nn.Linear(24, 3))


def train(model, dev, batches):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    for step in range(2):
        opt.zero_grad(set_to_none=True)
        for micro in range(2):
            x, y = batches[step * 2 + micro]
            loss = nn.functional.cross_entropy(model(x.to(dev)), y.to(dev)) / 2
            loss.backward()
        opt.step()
    return [p.detach().cpu() for p in model.parameters()]


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    ref = make()
    gpu = copy.deepcopy(ref).cuda()
    g = torch.Generator().manual_seed(5)
    batches = [(torch.randn(6, 12, generator=g), torch.randint(0, 3, (6,), generator=g)) for _ in range(4)]
    a = train(ref, "cpu", batches)
    b = train(gpu, "cuda", batches)
    for p, q in zip(a, b):
        assert torch.allclose(p, q, atol=1e-5), (p - q).abs().max()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
