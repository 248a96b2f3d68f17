"""nn.DataParallel over two GPUs of one process: the batch is scattered, the module replicated
(broadcast_coalesced), each replica runs in its own host thread on its own device's current stream
(parallel_apply), the outputs are gathered on device 0, and backward reduces the replicas' gradients onto the
original parameters; three SGD steps give the parameters of the same steps on the CPU.

EXPECTED: clean
WORLD_SIZE: 1
DEVICE_COUNT: 2
REASON: torch/nn/parallel/data_parallel.py forward (scatter, replicate, parallel_apply, gather); torch/nn/parallel/_functions.py Broadcast / ReduceAddCoalesced / Gather backward; torch/nn/parallel/parallel_apply.py _worker (with device_index(device), stream).
"""
import copy

import torch
import torch.nn as nn


def main():
    torch.cuda.set_device(0)
    torch.manual_seed(0)
    ref = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 4))
    gpu = copy.deepcopy(ref).cuda()
    dp = nn.DataParallel(gpu, device_ids=[0, 1])
    opt_ref = torch.optim.SGD(ref.parameters(), lr=0.1)
    opt = torch.optim.SGD(gpu.parameters(), lr=0.1)
    for step in range(3):
        x = torch.randn(8, 16)
        y = torch.randn(8, 4)
        out = dp(x.cuda())
        assert out.device == torch.device("cuda", 0)
        loss = (out - y.cuda()).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        ref_loss = (ref(x) - y).pow(2).mean()
        opt_ref.zero_grad()
        ref_loss.backward()
        opt_ref.step()
        assert abs(loss.item() - ref_loss.item()) < 1e-5, (step, loss.item(), ref_loss.item())
    for p, q in zip(ref.parameters(), gpu.parameters()):
        assert torch.allclose(p, q.detach().cpu(), rtol=1e-5, atol=1e-6), (p - q.detach().cpu()).abs().max()


if __name__ == "__main__":
    main()
