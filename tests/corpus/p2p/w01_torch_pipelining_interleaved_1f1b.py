"""torch.distributed.pipelining with virtual stages: an 8-layer MLP split into 4 PipelineStages, two per rank
(rank 0 holds stages 0 and 2, rank 1 stages 1 and 3, the loop-around placement), run with
ScheduleInterleaved1F1B, then ScheduleLoopedBFS, then ScheduleInterleavedZeroBubble (backward split into input
and weight gradients), 4 micro-batches each; the last stage's losses and every stage's parameter gradients checked
against one process after each step.

EXPECTED: clean
WORLD_SIZE: 2
MODELLED ON: torch/distributed/pipelining/schedules.py (PipelineScheduleMulti: ScheduleInterleaved1F1B,
ScheduleLoopedBFS, ScheduleInterleavedZeroBubble; `stage_index = rank + k * world_size`, as torchtitan's
pipeline_module_split / build_pipeline_schedule place virtual stages), and stage.py (_PipelineStageBase:
batch_isend_irecv of activations and gradients, the receive works waited before the compute uses them).
REASON: every schedule action that consumes a received buffer first waits its p2p works (schedules.py
_wait_batch_p2p / `_step_microbatches` of PipelineScheduleMulti); the zero-bubble schedule computes input
gradients (stage.backward_maybe_with_nosync with backward_type "input") before weight gradients ("weight"), both
from the same autograd graph, so every stage's gradients equal the sequential model's gradient of the mean
micro-batch loss (scale_grads=True).
"""
import os
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.pipelining import (PipelineStage, ScheduleInterleaved1F1B, ScheduleInterleavedZeroBubble,
                                          ScheduleLoopedBFS)

H, B, M, STAGES = 8, 8, 4, 4


def make(seed):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(H, H), nn.Tanh(), nn.Linear(H, H), nn.Tanh())


def loss_fn(out, tgt):
    return (out - tgt).pow(2).mean()


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dev = torch.device("cuda", rank)
    refs = [make(s) for s in range(STAGES)]
    mine = [s for s in range(STAGES) if s % world == rank]          # rank 0: 0, 2; rank 1: 1, 3
    parts = {s: make(s).to(dev) for s in mine}
    g = torch.Generator().manual_seed(5)
    classes = (ScheduleInterleaved1F1B, ScheduleLoopedBFS, ScheduleInterleavedZeroBubble)
    data = [(torch.randn(B, H, generator=g), torch.randn(B, H, generator=g)) for _ in classes]
    for step, cls in enumerate(classes):
        stages = [PipelineStage(parts[s], s, STAGES, dev) for s in mine]
        sched = cls(stages, n_microbatches=M, loss_fn=loss_fn)
        x, y = data[step]
        for p in parts.values():
            p.zero_grad()
        losses = []
        if rank == 0:
            sched.step(x.to(dev))
        else:
            sched.step(target=y.to(dev), losses=losses)
        for r in refs:
            r.zero_grad()
        ref_losses = []
        for xm, ym in zip(x.chunk(M), y.chunk(M)):
            h = xm
            for r in refs:
                h = r(h)
            ref_losses.append(loss_fn(h, ym))
        (sum(ref_losses) / M).backward()
        if rank == world - 1:
            assert len(losses) == M, losses
            for l, rl in zip(losses, ref_losses):
                assert torch.allclose(l.detach().cpu(), rl.detach(), atol=1e-5), (cls.__name__, l, rl)
        for s in mine:
            for p, q in zip(parts[s].parameters(), refs[s].parameters()):
                assert p.grad is not None, (cls.__name__, s)
                assert torch.allclose(p.grad.cpu(), q.grad, atol=1e-5), (cls.__name__, s, p.grad.cpu() - q.grad)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
