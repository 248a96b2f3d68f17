"""torch.distributed.checkpoint of an FSDP2 model and its Adam state, staged before the save: DefaultStager with
pinned staging storages and non_blocking copies, staging in the caller's thread; training goes on (one more step
updates the parameters in place) before dcp.save writes the staged copy; a fresh FSDP2 model and optimizer load it
with dcp.load, and their full parameters equal the values at the staging call, not the updated ones.

EXPECTED: clean
WORLD_SIZE: 2
MODELLED ON: torch/distributed/checkpoint/staging.py DefaultStager(StagingOptions(use_pinned_memory=True,
use_shared_memory=False, use_async_staging=False, use_non_blocking_copy=True)) (_state_dict_stager.py
StateDictStager: `type(storage)(n, device="cpu")`, pinned with cudart().cudaHostRegister, `copy_(storage,
non_blocking=True)`, memo by id(untyped_storage), the tensors' `__dict__` copied), then
torch.accelerator.synchronize(); the staged dict saved with dcp.save as torchtitan's checkpointer saves one.
REASON: the stager's copies are on the current stream after the step's kernels and the host synchronizes before
returning the staged dict, so the save reads finished host copies and the next step's in-place updates do not
reach them. Under simdist before notes e1-e2 the staging was refused by name, then (with it modelled) a recycled
id() of a per-call storage object made the stager stage another tensor's bytes (silent wrong values).
"""
import os
import shutil
import tempfile

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn as nn
from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions
from torch.distributed.fsdp import fully_shard

H = 16


def build():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(H, 2 * H), nn.ReLU(), nn.Linear(2 * H, H)).cuda()
    for layer in (m[0], m[2]):
        fully_shard(layer)
    fully_shard(m)
    return m


def main():
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("cpu:gloo,cuda:nccl")
    rank = dist.get_rank()
    box = [tempfile.mkdtemp() if rank == 0 else None]
    dist.broadcast_object_list(box, src=0)
    g = torch.Generator().manual_seed(1)
    data = [(torch.randn(8, H, generator=g), torch.randn(8, H, generator=g)) for _ in range(4)]

    def step(model, opt, i):
        x, y = (t[rank * 4:(rank + 1) * 4].cuda() for t in data[i])
        loss = (model(x) - y).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()

    m = build()
    opt = torch.optim.Adam(m.parameters(), lr=1e-2)
    for i in range(2):
        step(m, opt, i)
    saved = {k: v.full_tensor().cpu() for k, v in m.state_dict().items()}
    stager = DefaultStager(StagingOptions(True, False, False, True))
    staged = stager.stage({"model": m.state_dict(), "optim": opt.state_dict()})
    step(m, opt, 2)                                   # in-place updates after the staging call
    dcp.save(staged, checkpoint_id=box[0])
    stager.close()

    m2 = build()
    opt2 = torch.optim.Adam(m2.parameters(), lr=1e-2)
    step(m2, opt2, 3)                                 # makes the optimizer state the checkpoint fills
    sd = {"model": m2.state_dict(), "optim": opt2.state_dict()}
    dcp.load(sd, checkpoint_id=box[0])
    m2.load_state_dict(sd["model"])
    opt2.load_state_dict(sd["optim"])
    loaded = {k: v.full_tensor().cpu() for k, v in m2.state_dict().items()}
    assert loaded.keys() == saved.keys()
    for k in saved:
        assert torch.equal(loaded[k], saved[k]), k
    assert not torch.equal(m.state_dict()["0.weight"].full_tensor().cpu(), saved["0.weight"])
    dist.barrier()
    if rank == 0:
        shutil.rmtree(box[0], ignore_errors=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
