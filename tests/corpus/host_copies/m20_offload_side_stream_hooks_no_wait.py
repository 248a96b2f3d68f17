"""The bug twin of m19: pack starts the D2H copy on the offload stream without making it wait for the compute
stream, so the copy may read the activation before the kernel that produces it has run.

EXPECTED: hazard
KINDS: host-read
WORLD_SIZE: 1
REASON: work on two streams is unordered without wait_stream / wait_event (https://pytorch.org/docs/stable/notes/cuda.html#cuda-streams); the activation is written on the current stream and the device-to-host copy reading it (simdist's kind for a D2H copy that reads unordered bytes: host-read) runs on the offload stream.
"""
import torch
import torch.nn as nn


def main():
    torch.cuda.set_device(0)
    torch.manual_seed(0)
    offload = torch.cuda.Stream()

    def pack(t):
        if t.device.type != "cuda" or t.numel() < 256:
            return t
        with torch.cuda.stream(offload):          # BUG: no offload.wait_stream(current_stream())
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
        t = host.to(dev)
        return t

    gpu = nn.Sequential(nn.Linear(64, 128), nn.SiLU(), nn.Linear(128, 4)).cuda()
    x = torch.randn(16, 64, device="cuda")
    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        loss = gpu(x).pow(2).mean()
    loss.backward()
    print(gpu[0].weight.grad.sum().item())


if __name__ == "__main__":
    main()
