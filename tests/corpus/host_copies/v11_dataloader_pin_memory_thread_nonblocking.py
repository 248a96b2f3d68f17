"""The standard input pipeline: DataLoader(num_workers=2, pin_memory=True), whose pin-memory thread pins each
collated batch, and `batch.to("cuda", non_blocking=True)` in the training loop (the ImageNet example, torchtune
and Lightning do this); a few SGD steps give the same parameters as the CPU loop over the same batches.

EXPECTED: clean
WORLD_SIZE: 1
REASON: torch/utils/data/_utils/pin_memory.py _pin_memory_loop (a thread: torch.accelerator.set_device_index(device_id), then data.pin_memory() per batch); an async H2D copy from pinned memory is ordered on the current stream before the kernels that read its output (https://pytorch.org/docs/stable/notes/cuda.html#use-pinned-memory-buffers); a fresh pinned batch per step is never rewritten by the host.
"""
import copy

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    torch.cuda.set_device(0)
    torch.manual_seed(0)
    xs, ys = torch.randn(64, 10), torch.randn(64, 2)
    loader = DataLoader(TensorDataset(xs, ys), batch_size=16, shuffle=False, num_workers=2, pin_memory=True)
    ref = nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 2))
    gpu = copy.deepcopy(ref).cuda()
    opt, opt_ref = torch.optim.SGD(gpu.parameters(), lr=0.05), torch.optim.SGD(ref.parameters(), lr=0.05)
    seen = 0
    for xb, yb in loader:
        assert xb.is_pinned() and yb.is_pinned()
        xd, yd = xb.to("cuda", non_blocking=True), yb.to("cuda", non_blocking=True)
        loss = nn.functional.mse_loss(gpu(xd), yd)
        opt.zero_grad()
        loss.backward()
        opt.step()
        ref_loss = nn.functional.mse_loss(ref(xb), yb)
        opt_ref.zero_grad()
        ref_loss.backward()
        opt_ref.step()
        assert abs(loss.item() - ref_loss.item()) < 1e-5
        seen += xb.shape[0]
    assert seen == 64
    for p, q in zip(ref.parameters(), gpu.parameters()):
        assert torch.allclose(p, q.detach().cpu(), rtol=1e-5, atol=1e-6)


if __name__ == "__main__":
    main()
