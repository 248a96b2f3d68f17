"""The fix twin of n02: torch's ZeroRedundancyOptimizer.consolidate_state_dict, then torch.cuda.synchronize() before
the consolidated state is read on the host.

EXPECTED: clean
REASON: synchronize() waits for every stream of the device (CUDA semantics), so the asynchronous D2H copies
into pinned memory that consolidate_state_dict issues (zero_redundancy_optimizer.py:48, .to("cpu",
non_blocking=True)) are complete before the host reads them; the consolidated state equals plain AdamW's.
"""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP

STEPS = 3
SYNCHRONIZE = True


def model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 32), nn.GELU(), nn.Linear(32, 8), nn.LayerNorm(8))


def batches(world):
    g = torch.Generator().manual_seed(7)
    return [torch.randn(8 * world, 8, generator=g) for _ in range(STEPS)]


def main():
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    data = batches(world)

    ref = model()
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=0.01)
    for x in data:
        ref_opt.zero_grad()
        ref(x).pow(2).mean().backward()
        ref_opt.step()

    m = model().cuda()
    ddp = DDP(m, device_ids=[torch.cuda.current_device()], bucket_cap_mb=0.0001)
    opt = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=torch.optim.AdamW, lr=0.01)
    for x in data:
        opt.zero_grad()
        ddp(x[rank * 8:(rank + 1) * 8].cuda()).pow(2).mean().backward()
        opt.step()
    for p, q in zip(m.parameters(), ref.parameters()):
        assert torch.allclose(p.detach().cpu(), q.detach(), atol=1e-5), (p, q)

    opt.consolidate_state_dict(to=0)
    if SYNCHRONIZE:
        torch.cuda.synchronize()  # the consolidated copies are asynchronous D2H copies into pinned memory
    if rank == 0:
        state = opt.state_dict()["state"]
        steps = {float(s["step"]) for s in state.values()}
        avg_ok = all(torch.allclose(state[i]["exp_avg"].cpu(), ref_opt.state[q]["exp_avg"], atol=1e-6)
                     for i, q in enumerate(ref.parameters()))
        print("consolidated steps", sorted(steps), "exp_avg equal to the reference:", avg_ok)
        if SYNCHRONIZE:
            assert len(state) == len(list(m.parameters())) and steps == {STEPS} and avg_ok, steps
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
