"""clip_grad_norm_ (default foreach path) after backward, then SGD step; values vs CPU, returned norm vs CPU.

EXPECTED: clean
REASON: single stream.
"""
import copy
import os
import torch
import torch.nn as nn
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    torch.manual_seed(1)
    ref = nn.Sequential(nn.Linear(6, 12), nn.ReLU(), nn.Linear(12, 6))
    gpu = copy.deepcopy(ref).cuda()
    x = torch.randn(5, 6) * 10
    out = []
    for m, dev in ((ref, "cpu"), (gpu, "cuda")):
        m(x.to(dev)).pow(2).sum().backward()
        n = torch.nn.utils.clip_grad_norm_(m.parameters(), max_norm=0.5)
        torch.optim.SGD(m.parameters(), lr=0.1).step()
        out.append(n.item())
    assert abs(out[0] - out[1]) / out[0] < 1e-5, out
    assert out[0] > 0.5
    for p, q in zip(ref.parameters(), gpu.parameters()):
        assert torch.allclose(p.grad, q.grad.cpu(), atol=1e-6)
        assert torch.allclose(p, q.detach().cpu(), atol=1e-6)
    tot = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(q.grad) for q in gpu.parameters()]))
    assert abs(tot.item() - 0.5) < 1e-3, tot.item()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
