"""pytorch/examples mnist_hogwild/main.py: `model = Net().to(device); model.share_memory()` before handing the
model to training processes. For CUDA parameters share_memory_() is a no-op (CUDA tensors cross processes by
CUDA IPC when pickled) and is_shared() is True; training after it is ordinary and matches the CPU model.

EXPECTED: clean
WORLD_SIZE: 1
REASON: torch/nn/modules/module.py share_memory: self._apply(lambda t: t.share_memory_()); torch/storage.py _StorageBase.share_memory_ ("only CPU uses POSIX shared memory": nothing for CUDA); torch/csrc/StorageMethods.cpp THPStorage_isShared returns True for CUDA storages; pytorch/examples mnist_hogwild/main.py.
"""
import copy

import torch
import torch.nn as nn


def main():
    torch.cuda.set_device(0)
    torch.manual_seed(0)
    ref = nn.Sequential(nn.Linear(20, 30), nn.ReLU(), nn.Linear(30, 5))
    model = copy.deepcopy(ref).to("cuda")
    model.share_memory()
    assert all(p.is_shared() and p.is_cuda for p in model.parameters())
    opt, opt_ref = torch.optim.SGD(model.parameters(), lr=0.1), torch.optim.SGD(ref.parameters(), lr=0.1)
    for _ in range(3):
        x, y = torch.randn(8, 20), torch.randint(0, 5, (8,))
        loss = nn.functional.cross_entropy(model(x.cuda()), y.cuda())
        opt.zero_grad()
        loss.backward()
        opt.step()
        ref_loss = nn.functional.cross_entropy(ref(x), y)
        opt_ref.zero_grad()
        ref_loss.backward()
        opt_ref.step()
    for p, q in zip(ref.parameters(), model.parameters()):
        assert torch.allclose(p, q.detach().cpu(), rtol=1e-5, atol=1e-6)


if __name__ == "__main__":
    main()
