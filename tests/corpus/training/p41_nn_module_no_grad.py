"""nn.Module (Linear, GELU, LayerNorm, Linear) forward under no_grad on the GPU vs the same module on CPU.

EXPECTED: clean
REASON: single stream; module.cuda() copies parameters synchronously from pageable memory.
"""
import os
import torch
import torch.nn as nn
import torch.distributed as dist


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(48, 96)
        self.act = nn.GELU()
        self.norm = nn.LayerNorm(96)
        self.fc2 = nn.Linear(96, 10, bias=False)

    def forward(self, x):
        return self.fc2(self.norm(self.act(self.fc1(x))))


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    torch.manual_seed(7)
    model = MLP().eval()
    x = torch.randn(20, 48)
    with torch.no_grad():
        ref = model(x)
        model.cuda()
        out = model(x.cuda())
        probs = torch.softmax(out, dim=-1)
        top = probs.topk(3, dim=-1).indices
    assert torch.allclose(out.cpu(), ref, rtol=1e-4, atol=1e-5), (out.cpu() - ref).abs().max()
    assert top.tolist() == torch.softmax(ref, -1).topk(3, dim=-1).indices.tolist()
    with torch.no_grad():
        half = model.to(torch.bfloat16)(x.cuda().bfloat16()).float()
    assert (half.cpu() - ref).abs().max().item() < 0.2
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
