"""Embedding + Conv2d + BatchNorm2d(train) + Linear, one SGD(momentum, weight_decay) step and a second forward, vs CPU.

EXPECTED: clean
REASON: single stream.
"""
import copy
import os
import torch
import torch.nn as nn
import torch.distributed as dist


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(20, 16)
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4 * 16, 5)

    def forward(self, tok):
        h = self.emb(tok).unsqueeze(1)          # (B, 1, 16? ) -> make it 4x4 images
        h = h.view(tok.shape[0], 1, 4, 4)
        h = torch.relu(self.bn(self.conv(h)))
        return self.fc(h.flatten(1))


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    torch.manual_seed(4)
    ref = Net().train()
    gpu = copy.deepcopy(ref).cuda()
    tok = torch.randint(0, 20, (6,))
    tgt = torch.randint(0, 5, (6,))
    res = []
    for m, dev in ((ref, "cpu"), (gpu, "cuda")):
        opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-3)
        for _ in range(2):
            opt.zero_grad()
            nn.functional.cross_entropy(m(tok.to(dev)), tgt.to(dev)).backward()
            opt.step()
        res.append(m(tok.to(dev)).detach().cpu())
    assert torch.allclose(res[0], res[1], atol=1e-4), (res[0] - res[1]).abs().max()
    assert torch.allclose(ref.bn.running_mean, gpu.bn.running_mean.cpu(), atol=1e-5)
    assert gpu.bn.num_batches_tracked.item() == ref.bn.num_batches_tracked.item() == 3  # 2 steps + 1 train-mode forward
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
