"""Training loop: Linear/LayerNorm/GELU MLP, MSE loss, loss.backward(), SGD(momentum) step, 3 steps, vs CPU.

EXPECTED: clean
REASON: single stream: forward, backward (on the current stream) and optimizer.step all ordered on the default stream.
"""
import copy
import os
import torch
import torch.nn as nn
import torch.distributed as dist


def make():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 4))


def train(model, dev, xs, ys):
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for x, y in zip(xs, ys):
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.mse_loss(model(x.to(dev)), y.to(dev))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    ref = make()
    gpu = copy.deepcopy(ref).cuda()
    g = torch.Generator().manual_seed(1)
    xs = [torch.randn(8, 16, generator=g) for _ in range(3)]
    ys = [torch.randn(8, 4, generator=g) for _ in range(3)]
    l_ref = train(ref, "cpu", xs, ys)
    l_gpu = train(gpu, "cuda", xs, ys)
    assert all(abs(a - b) < 1e-5 for a, b in zip(l_ref, l_gpu)), (l_ref, l_gpu)
    for p, q in zip(ref.parameters(), gpu.parameters()):
        assert torch.allclose(p, q.cpu(), atol=1e-5), (p - q.cpu()).abs().max()
    assert l_gpu[-1] < l_gpu[0]
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
