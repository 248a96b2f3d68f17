"""Activation offloading with torch.autograd.graph.save_on_cpu(pin_memory=True) (the activation-offload recipe of
the autograd docs, used by torchtune's and FSDP's CPU offload): saved tensors go to pinned host memory in the
forward and come back for backward; the gradients equal a plain CPU run's.

EXPECTED: clean
WORLD_SIZE: 1
REASON: torch/autograd/graph.py save_on_cpu: pack_to_cpu copies each saved tensor to a pinned CPU tensor (`packed.copy_(tensor)`, blocking: the current stream's order), unpack_from_cpu does `tensor.to(device, non_blocking=pin_memory)` on the current stream, which backward then uses in order.
"""
import copy

import torch
import torch.nn as nn


def main():
    torch.cuda.set_device(0)
    torch.manual_seed(0)
    ref = nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 128), nn.Tanh(), nn.Linear(128, 8))
    gpu = copy.deepcopy(ref).cuda()
    x = torch.randn(32, 64)
    ref(x).pow(2).sum().backward()
    with torch.autograd.graph.save_on_cpu(pin_memory=True):
        loss = gpu(x.cuda()).pow(2).sum()
    loss.backward()
    for p, q in zip(ref.parameters(), gpu.parameters()):
        assert torch.allclose(p.grad, q.grad.cpu(), rtol=1e-4, atol=1e-5), (p.grad - q.grad.cpu()).abs().max()


if __name__ == "__main__":
    main()
