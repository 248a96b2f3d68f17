"""The pack half of side-stream activation offloading without keeping the activation alive: pack queues the D2H
copy on the offload stream and returns only the host buffer, so autograd drops the last reference to the device
activation while the copy may still be queued; its block goes back to the compute stream's pool and the next
activation of the forward reuses it, overwriting bytes the copy has not read yet (torchtune keeps the tensor in
a stash until the copy's event completes; Megatron calls record_stream).

EXPECTED: hazard
KINDS: reuse-after-free
WORLD_SIZE: 1
REASON: c10/cuda/CUDACachingAllocator.cpp: a freed block is reusable at once by its own stream; only record_stream (or a live reference) defers it for work on another stream (https://pytorch.org/docs/stable/generated/torch.Tensor.record_stream.html); torchtune/training/_activation_offloading.py fwd_stash.
"""
import torch
import torch.nn as nn


def main():
    torch.cuda.set_device(0)
    torch.manual_seed(0)
    offload = torch.cuda.Stream()

    def pack(t):
        if t.device.type != "cuda" or t.numel() < 4096:
            return t
        offload.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(offload):
            host = torch.empty(t.size(), dtype=t.dtype, pin_memory=True)
            host.copy_(t, non_blocking=True)          # BUG: t is neither stashed nor record_stream'ed
            ev = torch.cuda.Event()
            ev.record()
        return (host, ev, t.device)

    def unpack(packed):
        if isinstance(packed, torch.Tensor):
            return packed
        host, ev, dev = packed
        ev.synchronize()
        return host.to(dev)

    gpu = nn.Sequential(nn.Linear(256, 256), nn.Tanh(), nn.Linear(256, 256), nn.Tanh(), nn.Linear(256, 4)).cuda()
    x = torch.randn(64, 256, device="cuda")
    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        loss = gpu(x).pow(2).mean()
    loss.backward()
    print(gpu[0].weight.grad.sum().item())


if __name__ == "__main__":
    main()
