"""The bug twin of x17 without `on_group_commit_backward`'s `wait_reload_event(torch.cuda.current_stream())`: the
reloaded activations are written by the h2d stream's copies, and backward reads them on the compute stream with
nothing ordering the read after the copy. On a GPU the backward GEMMs read the fresh blocks (here NaN) while the
copies are delayed; gradients come out wrong.

EXPECTED: hazard
KINDS: read-after-write
KINDS_ALSO: write-after-read, reuse-after-free
WORLD_SIZE: 1
MODELLED ON: NVIDIA/Megatron-LM megatron/core/pipeline_parallel/fine_grained_activation_offload.py (megatron-core
0.16.1): `ChunkOffloadHandler.bulk_offload_group` (on the d2h stream: pinned CPU buffer, `copy_(non_blocking=True)`,
`tensor_on_device.record_stream(self.d2h_stream)`, `record_offload_event`), `on_group_commit_forward`
(`d2h_stream.wait_stream(current_stream())` first), `on_group_start_backward` (`h2d_stream.wait_stream(
current_stream())`, then `bulk_reload_group`: `wait_offload_event(h2d_stream)`, `torch.empty` + `copy_(non_blocking)`
on the h2d stream, `record_reload_event`), `on_group_commit_backward` (`wait_reload_event(current_stream())`), with
`torch.autograd.graph.saved_tensors_hooks` (Megatron pushes the same pack/unpack pair as default hooks).
Simplified: one chunk, a group per layer, the CPU buffer pool replaced by fresh pinned buffers.
RULE: work on two streams is unordered unless an event or wait_stream orders it
(https://pytorch.org/docs/stable/notes/cuda.html#cuda-streams).
"""
import os

import torch
import torch.nn as nn

FAULT = "no_reload_wait"
DELAY = int(os.environ.get("X_DELAY_CYCLES", "0"))  # a GPU check's torch.cuda._sleep on the copy streams


class Group:
    def __init__(self, name):
        self.name, self.tensors = name, {}
        self.offload_event, self.reload_event = torch.cuda.Event(), torch.cuda.Event()


class OffloadHandler:
    """Megatron-Core's ChunkOffloadHandler for one chunk: a group per layer, saved tensors pushed in forward,
    offloaded in bulk at the group's commit, reloaded in bulk at the start of its backward."""

    def __init__(self, min_numel):
        self.d2h, self.h2d = torch.cuda.Stream(), torch.cuda.Stream()
        self.groups, self.reloading, self.min_numel = [], [], min_numel

    # saved_tensors_hooks
    def pack(self, t):
        g = self.groups[-1]
        tag = (len(self.groups) - 1, len(g.tensors))
        g.tensors[tag] = t
        return tag

    def unpack(self, tag):
        return self.groups[tag[0]].tensors.pop(tag)

    # forward
    def group_start_forward(self, name):
        self.groups.append(Group(name))

    def group_commit_forward(self):
        g = self.groups[-1]
        self.d2h.wait_stream(torch.cuda.current_stream())          # compute done before the copies
        with torch.cuda.stream(self.d2h):
            if DELAY:
                torch.cuda._sleep(DELAY)
            for tag, t in g.tensors.items():
                if t.numel() >= self.min_numel:
                    cpu = torch.empty(t.shape, dtype=t.dtype, device="cpu", pin_memory=True)
                    cpu.copy_(t, non_blocking=True)
                    if FAULT != "no_record_stream":
                        t.record_stream(self.d2h)                    # the compute stream frees it next
                    g.tensors[tag] = (t.device, cpu)
            g.offload_event.record(self.d2h)

    # backward
    def group_start_backward(self, index):
        g = self.groups[index]
        if FAULT != "no_h2d_wait_stream":
            self.h2d.wait_stream(torch.cuda.current_stream())      # compute done with earlier reloads' blocks
        with torch.cuda.stream(self.h2d):
            g.offload_event.wait(self.h2d)
            if DELAY:
                torch.cuda._sleep(DELAY)
            for tag, state in g.tensors.items():
                if isinstance(state, tuple):
                    dev, cpu = state
                    gpu = torch.empty(cpu.shape, dtype=cpu.dtype, device=dev)
                    gpu.copy_(cpu, non_blocking=True)
                    g.tensors[tag] = gpu
            g.reload_event.record(self.h2d)
        self.reloading.append(g)

    def group_commit_backward(self, index):
        g = self.groups[index]
        if g in self.reloading:
            if FAULT != "no_reload_wait":
                g.reload_event.wait(torch.cuda.current_stream())   # reloads landed before backward reads them
            self.reloading.remove(g)


class GroupBoundary(torch.autograd.Function):
    """Megatron's FineGrainedOffloadingGroupCommitFunction: commits the group in forward; in backward, first
    makes the compute stream wait for this group's reloads, then starts the reload of the group below."""

    @staticmethod
    def forward(ctx, x, handler, index):
        handler.group_commit_forward()
        ctx.handler, ctx.index = handler, index
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        ctx.handler.group_commit_backward(ctx.index)
        return grad, None, None


class StartBackward(torch.autograd.Function):
    """At the start of a group's backward (the gradient reaching its output), reload its tensors."""

    @staticmethod
    def forward(ctx, x, handler, index):
        ctx.handler, ctx.index = handler, index
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        ctx.handler.group_start_backward(ctx.index)
        return grad, None, None


def make_layers():
    torch.manual_seed(0)
    return nn.ModuleList(nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 256)) for _ in range(3))


def step(layers, x, handler=None):
    for i, layer in enumerate(layers):
        if handler is None:
            x = x + layer(x)
            continue
        handler.group_start_forward(f"layer{i}")
        with torch.autograd.graph.saved_tensors_hooks(handler.pack, handler.unpack):
            y = x + layer(x)
        y = GroupBoundary.apply(y, handler, i)
        x = StartBackward.apply(y, handler, i)
    return x.square().mean()


def main():
    torch.cuda.set_device(0)
    ref_layers = make_layers()
    g = torch.Generator().manual_seed(1)
    batches = [torch.randn(64, 256, generator=g) for _ in range(2)]
    for b in batches:
        step(ref_layers, b).backward()
    layers = make_layers().cuda()
    for b in batches:
        handler = OffloadHandler(min_numel=1 << 14)
        step(layers, b.cuda(), handler).backward()
        assert all(not g.tensors for g in handler.groups)
    worst = max((p.grad.cpu() - r.grad).abs().max().item() / (r.grad.abs().max().item() or 1.0)
                for p, r in zip(layers.parameters(), ref_layers.parameters()))
    print(f"largest relative gradient difference from the CPU reference: {worst:.3g}")
    if FAULT == "none":
        assert worst < 1e-4, worst


if __name__ == "__main__":
    main()
