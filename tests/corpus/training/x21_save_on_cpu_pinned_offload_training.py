"""torch.autograd.graph.save_on_cpu(pin_memory=True), torch's own activation offloading (torchtune and torchtitan
build their offloading on the same saved-tensor hooks): every tensor autograd saves in forward is copied to a
pinned CPU buffer (a blocking copy_), and copied back with non_blocking=True when backward unpacks it, on the
current stream, which then reads it in order. Three SGD steps give the parameters of the same loop without
offloading (within float32 rounding: see main).

EXPECTED: clean
WORLD_SIZE: 1
MODELLED ON: torch/autograd/graph.py `save_on_cpu` (pack_to_cpu: `torch.empty(..., pin_memory=...)` then
`packed.copy_(tensor)`; unpack_from_cpu: `packed.to(device, non_blocking=pin_memory)`); pytorch/torchtune
`torchtune/training/_activation_offloading.py` (OffloadActivations, a saved_tensors_hooks subclass).
RULE: a blocking D2H copy returns after the copy is done (memcpy_and_sync); a non_blocking H2D copy from pinned memory
runs on the current stream, so later kernels on that stream read its result in order
(https://pytorch.org/docs/stable/notes/cuda.html#use-pinned-memory-buffers).
"""
import torch
import torch.nn as nn


def train(offload):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(128, 256), nn.SiLU(), nn.Linear(256, 256), nn.SiLU(), nn.Linear(256, 10)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(1)
    for _ in range(3):
        x = torch.randn(32, 128, generator=g).cuda()
        y = torch.randint(0, 10, (32,), generator=g).cuda()
        if offload:
            with torch.autograd.graph.save_on_cpu(pin_memory=True):
                loss = nn.functional.cross_entropy(model(x), y)
        else:
            loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return [p.detach().cpu() for p in model.parameters()]


def main():
    torch.cuda.set_device(0)
    plain, offloaded = train(False), train(True)
    # the offloaded copies are contiguous where autograd saved transposed views (weight.t()), so a GPU's GEMMs
    # may round differently; equal within float32 rounding
    assert all(torch.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(plain, offloaded))
    print("save_on_cpu training equals the plain loop; bit for bit:",
          all(torch.equal(a, b) for a, b in zip(plain, offloaded)))


if __name__ == "__main__":
    main()
