"""Activation offloading on a side stream with saved_tensors_hooks, as Megatron-Core's cpu_offload and
torchtune's OffloadActivations do: pack waits for the compute stream, copies the activation to pinned memory on
the offload stream and records an event; unpack synchronizes that event, copies back on the offload stream and
makes the compute stream wait; record_stream keeps each tensor alive for the other stream. Gradients equal a CPU
run's.

EXPECTED: clean
WORLD_SIZE: 1
REASON: torch/autograd/graph.py saved_tensors_hooks (pack at save, unpack at backward use); cross-stream order by wait_stream / wait_event and lifetime by record_stream (https://pytorch.org/docs/stable/notes/cuda.html#cuda-streams).
"""
import copy

import torch
import torch.nn as nn


def main():
    torch.cuda.set_device(0)
    torch.manual_seed(0)
    offload = torch.cuda.Stream()

    def pack(t):
        if t.device.type != "cuda" or t.numel() < 256:
            return t
        offload.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(offload):
            host = torch.empty(t.size(), dtype=t.dtype, pin_memory=True)
            host.copy_(t, non_blocking=True)
            ev = torch.cuda.Event()
            ev.record()
        t.record_stream(offload)
        return (host, ev, t.device)

    def unpack(packed):
        if isinstance(packed, torch.Tensor):
            return packed
        host, ev, dev = packed
        ev.synchronize()
        with torch.cuda.stream(offload):
            t = host.to(dev, non_blocking=True)
        torch.cuda.current_stream().wait_stream(offload)
        t.record_stream(torch.cuda.current_stream())
        return t

    ref = nn.Sequential(nn.Linear(64, 128), nn.SiLU(), nn.Linear(128, 128), nn.SiLU(), nn.Linear(128, 4))
    gpu = copy.deepcopy(ref).cuda()
    x = torch.randn(16, 64)
    ref(x).pow(2).mean().backward()
    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        loss = gpu(x.cuda()).pow(2).mean()
    loss.backward()
    for p, q in zip(ref.parameters(), gpu.parameters()):
        assert torch.allclose(p.grad, q.grad.cpu(), rtol=1e-4, atol=1e-6), (p.grad - q.grad.cpu()).abs().max()


if __name__ == "__main__":
    main()
