"""torch.distributed.pipelining's tracing frontend: a Transformer-like block stack (embedding, 4 residual MLP
blocks, a head) split by `pipeline(module, mb_args, split_spec={...: SplitPoint.BEGINNING})` into 4 stages, one
per rank, each built with `pipe.build_stage(rank, device)`; Schedule1F1B with 8 micro-batches and a loss; the
losses on the last rank and the gradients of every rank's submodule checked against the unsplit module in one
process (parameters matched by their qualified names in the original module).

EXPECTED: hazard
KINDS: write-after-write
WORLD_SIZE: 4
MODELLED ON: torch/distributed/pipelining/_IR.py (`pipeline`, `SplitPoint`, `Pipe.build_stage`) as the
pipelining tutorial (docs/source/distributed.pipelining.rst, "Option 2: splitting a model automatically") and
torchtitan's tracer path use it; schedules.py Schedule1F1B.
REASON: a race in torch itself, benign: `build_stage` makes a `_PipelineStage`, for which the schedule's first
step runs the legacy warm-up (schedules.py `_warmup_p2p` -> stage.py `_get_init_p2p_neighbors_ops`): a middle
stage posts its forward receive from the previous stage and its backward receive from the next stage into the
same `recv_tensor = torch.zeros(1)`, in one batch_isend_irecv (one NCCL group: the two receives run
concurrently), so two unordered NCCL writes hit one buffer (stages 1 and 2 here; nothing reads it). With 2 ranks
there is no middle stage, and PipelineStage (not the traced `_PipelineStage`) takes the vote protocol instead.
The values are right: the traced stages exchange activations and gradients with batch_isend_irecv and wait each
receive before use (stage.py _PipelineStageBase), so every submodule's gradients equal the full module's
gradient of the mean micro-batch loss (scale_grads=True); the split keeps the original parameter names. The
warm-up also sends a 0-dim tensor into a [1] receive: NCCL matches p2p by count and datatype (simdist refused
it, notes w1).
"""
import os
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.pipelining import Schedule1F1B, SplitPoint, pipeline

V, H, T, B, M = 16, 8, 4, 8, 8


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(H)
        self.fc = nn.Linear(H, H)

    def forward(self, x):
        return x + torch.tanh(self.fc(self.norm(x)))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, H)
        self.layers = nn.ModuleList([Block() for _ in range(4)])
        self.head = nn.Linear(H, V)

    def forward(self, tok):
        h = self.emb(tok)
        for layer in self.layers:
            h = layer(h)
        return self.head(h)


def loss_fn(logits, tgt):
    return nn.functional.cross_entropy(logits.reshape(-1, V), tgt.reshape(-1))


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dev = torch.device("cuda", rank)
    torch.manual_seed(0)
    ref = Model()
    model = Model()
    model.load_state_dict(ref.state_dict())
    g = torch.Generator().manual_seed(1)
    tok = torch.randint(0, V, (B, T), generator=g)
    tgt = torch.randint(0, V, (B, T), generator=g)
    split_spec = {f"layers.{i}": SplitPoint.BEGINNING for i in (1, 2, 3)}
    pipe = pipeline(model, mb_args=(tok.chunk(M)[0],), split_spec=split_spec)
    assert pipe.num_stages == world, pipe.num_stages
    stage = pipe.build_stage(rank, dev)
    sched = Schedule1F1B(stage, n_microbatches=M, loss_fn=loss_fn)
    losses = []
    if rank == 0:
        sched.step(tok.to(dev))
    elif rank == world - 1:
        sched.step(target=tgt.to(dev), losses=losses)
    else:
        sched.step()
    ref_losses = [loss_fn(ref(t), y) for t, y in zip(tok.chunk(M), tgt.chunk(M))]
    (sum(ref_losses) / M).backward()
    if rank == world - 1:
        assert len(losses) == M
        for l, rl in zip(losses, ref_losses):
            assert torch.allclose(l.detach().cpu(), rl.detach(), atol=1e-5), (l, rl)
    ref_params = dict(ref.named_parameters())
    names = list(stage.submod.named_parameters())
    assert names, "stage holds no parameters"
    for name, p in names:
        q = ref_params[name]
        assert p.grad is not None, name
        assert torch.allclose(p.grad.cpu(), q.grad, atol=1e-5), (rank, name, (p.grad.cpu() - q.grad).abs().max())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
