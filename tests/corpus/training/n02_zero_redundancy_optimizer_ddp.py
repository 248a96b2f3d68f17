"""torch's ZeroRedundancyOptimizer (AdamW, optimizer state sharded over ranks) under DDP, three steps, then
consolidate_state_dict to rank 0, whose state is read on the host at once: a race inside torch's own code.

EXPECTED: hazard
KINDS: host-read
REASON: the training is ordered (DDP's Reducer makes the current stream wait on each bucket's all-reduce;
ZeroRedundancyOptimizer.step broadcasts the updated parameters with collectives on the current stream) and equals
plain AdamW on the whole batch. consolidate_state_dict (torch/distributed/optim/zero_redundancy_optimizer.py:564-578)
receives each other rank's state as bytes, torch.load(map_location=device) puts it on the GPU (the step counts
too), and _recursive_copy_to_device copies it back with `.to("cpu", non_blocking=True)` (line 48): a CUDA tensor
copied to the CPU with non_blocking=True lands in pinned memory, asynchronously (ATen _to_copy: pin_out), and
nothing synchronizes after the last rank's copies (the earlier ones are synchronized by the next rank's
length_tensor.item() in _broadcast_object). Reading the consolidated state on the host then races those copies.
The fix twin (n03) synchronizes first. (simdist failed here twice before: importing torch.distributed.optim
inside a run, whose @torch.jit.script functional optimizers tried to compile simdist's torch.tensor wrapper, and
torch.load with map_location="cuda", which moved host storages to a device a CPU build cannot make.)
"""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP

STEPS = 3
SYNCHRONIZE = globals().get("SYNCHRONIZE", False)  # n03, the fix twin, runs this file with True


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
