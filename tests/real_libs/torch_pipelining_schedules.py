"""torch.distributed.pipelining's schedules on a pipeline of Linear+Tanh stages (8 micro-batches, MSE, SGD, two
steps): every last-stage loss, every stage's gradient and final parameter checksum (float.hex) written per rank to
$PPOUT/out<RANK>.txt, for tests/test_e_series_real_scripts.py to compare simdist with torchrun on CPU (gloo) digit
for digit (notes e5).

    PPOUT=DIR torchrun --standalone --nproc-per-node=2 tests/real_libs/torch_pipelining_schedules.py interleaved
    PPOUT=DIR simdist run tests/real_libs/torch_pipelining_schedules.py -n 2 -- interleaved

Schedules: gpipe, 1f1b (one stage per rank), interleaved, loopedbfs, zb (two stages per rank, looped placement),
zbv, dualpipev (V placement: rank r holds stages r and 2W-1-r).
"""
import os, sys
import torch, torch.distributed as dist, torch.nn as nn
from torch.distributed.pipelining import (PipelineStage, Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B,
                                          ScheduleLoopedBFS, ScheduleInterleavedZeroBubble, ScheduleZBVZeroBubble,
                                          ScheduleDualPipeV)
H, B, M = 8, 16, 8
SCHED = sys.argv[1] if len(sys.argv) > 1 else "1f1b"
def make(i):
    g = torch.Generator().manual_seed(100 + i)
    m = nn.Sequential(nn.Linear(H, H), nn.Tanh())
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    return m
def ck(t):
    t = t.detach().double().flatten().cpu()
    w = torch.linspace(-1, 1, t.numel(), dtype=torch.float64)
    return (t.sum().item().hex(), (t * w).sum().item().hex())
def loss_fn(out, tgt):
    return (out - tgt).pow(2).mean()
_print = print
def print(*a, flush=True):
    with open(os.path.join(os.environ.get("PPOUT", "."), f"out{os.environ['RANK']}.txt"), "a") as f:
        _print(*a, file=f)
def main():
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    dev = torch.device("cuda", rank) if cuda else torch.device("cpu")
    multi = SCHED in ("interleaved", "loopedbfs", "zb", "zbv", "dualpipev")
    per = 2 if multi else 1
    n_stages = world * per
    ids = [rank + j * world for j in range(per)]
    if SCHED in ("zbv", "dualpipev"):
        ids = [rank, 2 * world - 1 - rank]
    parts = [make(i).to(dev) for i in ids]
    opt = torch.optim.SGD([p for m in parts for p in m.parameters()], lr=0.1)
    g = torch.Generator().manual_seed(3)
    data = [(torch.randn(B, H, generator=g), torch.randn(B, H, generator=g)) for _ in range(2)]
    cls = dict(gpipe=ScheduleGPipe, **{"1f1b": Schedule1F1B}, interleaved=ScheduleInterleaved1F1B,
               loopedbfs=ScheduleLoopedBFS, zb=ScheduleInterleavedZeroBubble,
               zbv=ScheduleZBVZeroBubble, dualpipev=ScheduleDualPipeV)[SCHED]
    stages = [PipelineStage(m, i, n_stages, dev) for m, i in zip(parts, ids)]
    sched = cls(stages if multi else stages[0], n_microbatches=M, loss_fn=loss_fn)
    for step in range(2):
        x, y = data[step]
        opt.zero_grad()
        losses = []
        has_first = 0 in ids
        has_last = n_stages - 1 in ids
        kw = {}
        if has_last:
            kw = dict(target=y.to(dev), losses=losses)
        if has_first:
            sched.step(x.to(dev), **kw)
        else:
            sched.step(**kw)
        if has_last:
            print(f"LOSS step{step} rank{rank}", [l.item().hex() for l in losses], flush=True)
        for m, i in zip(parts, ids):
            for n, p in m.named_parameters():
                print(f"GRAD step{step} stage{i} {n}", ck(p.grad), flush=True)
        opt.step()
    for m, i in zip(parts, ids):
        for n, p in m.named_parameters():
            print(f"PARAM stage{i} {n}", ck(p), flush=True)
    dist.destroy_process_group()
if __name__ == "__main__":
    main()
