"""torch.distributed.pipelining: a 4-layer MLP split into two PipelineStages (one per rank), ScheduleGPipe with 4
micro-batches and a loss function, then Schedule1F1B for a second step; the last stage's losses and every stage's
parameter gradients checked against one process.

EXPECTED: clean
WORLD_SIZE: 2
MODELLED ON: torch/distributed/pipelining (PipelineStage, ScheduleGPipe, Schedule1F1B: batch_isend_irecv of
activations and gradients between stages, `schedule.step(x, target=y, losses=losses)`), as torchtitan builds its
pipeline-parallel stages.
REASON: the schedule waits every p2p request before the stage's compute uses the received tensor
(_PipelineStageBase / _wait_batch_p2p); gradients accumulate over the micro-batches and are divided by
n_microbatches (schedules.py: "Gradients are scaled by num_microbatches depending on the `scale_grads` argument,
defaulting to True"), i.e. the reference's gradient of the mean of the micro-batch losses.
"""
import os
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

H, B, M = 8, 8, 4


def make(seed):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(H, H), nn.Tanh(), nn.Linear(H, H), nn.Tanh())


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dev = torch.device("cuda", rank)
    refs = [make(0), make(1)]
    part = make(rank).to(dev)

    def loss_fn(out, tgt):
        return (out - tgt).pow(2).mean()

    g = torch.Generator().manual_seed(3)
    data = [(torch.randn(B, H, generator=g), torch.randn(B, H, generator=g)) for _ in range(2)]
    for step, cls in enumerate((ScheduleGPipe, Schedule1F1B)):
        stage = PipelineStage(part, rank, world, dev)
        sched = cls(stage, n_microbatches=M, loss_fn=loss_fn)
        x, y = data[step]
        part.zero_grad()
        losses = []
        if rank == 0:
            sched.step(x.to(dev))
        else:
            sched.step(target=y.to(dev), losses=losses)
        for r in refs:
            r.zero_grad()
        ref_losses = [loss_fn(refs[1](refs[0](xm)), ym) for xm, ym in zip(x.chunk(M), y.chunk(M))]
        (sum(ref_losses) / M).backward()            # scale_grads=True: gradients divided by n_microbatches
        if rank == 1:
            assert len(losses) == M
            for l, rl in zip(losses, ref_losses):
                assert torch.allclose(l.detach().cpu(), rl.detach(), atol=1e-5), (l, rl)
        for p, q in zip(part.parameters(), refs[rank].parameters()):
            assert torch.allclose(p.grad.cpu(), q.grad, atol=1e-5), (step, p.grad.cpu() - q.grad)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
