"""The unpack half of side-stream activation offloading with its wait dropped: unpack brings the activation back
with an async H2D copy on the offload stream and hands it to backward without making the compute stream wait
for the offload stream, so the backward kernel that reads it may run before the copy wrote it.

EXPECTED: hazard
KINDS: read-after-write
WORLD_SIZE: 1
REASON: torchtune torchtune/training/_activation_offloading.py OffloadActivations.unpack_tensor_with_streams (the compute stream's wait_stream / wait_event on the offload stream before use) and Megatron-Core's cpu_offload pattern; work on two streams is unordered without wait_stream / wait_event (https://pytorch.org/docs/stable/notes/cuda.html#cuda-streams).
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
        offload.wait_event(ev)
        with torch.cuda.stream(offload):
            t = host.to(dev, non_blocking=True)
        t.record_stream(torch.cuda.current_stream())   # BUG: no current_stream().wait_stream(offload)
        return t

    gpu = nn.Sequential(nn.Linear(64, 256), nn.SiLU(), nn.Linear(256, 4)).cuda()
    x = torch.randn(32, 64, device="cuda")
    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        loss = gpu(x).pow(2).mean()
    loss.backward()
    print(gpu[0].weight.grad.sum().item())


if __name__ == "__main__":
    main()
