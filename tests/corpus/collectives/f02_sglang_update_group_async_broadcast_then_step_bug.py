"""Bug twin of f01: the trainer's rank 0 sends its weights into the inference group with `async_op=True` (as
SGLang's and slime's receivers do) and steps its optimizer again before it waits the handles. World 3: rank 0
trains, ranks 1-2 are the inference workers (TP=2, each keeps the whole weight here); the update group is made
over a `tcp://` rendezvous with c10d's `_new_process_group_helper` and `pg_group_ranks = {i: i}`. The receivers
post their async broadcasts into `torch.empty` buffers, wait them all, then load.

EXPECTED: hazard
KINDS: write-after-read
WORLD_SIZE: 3
MODELLED ON: SGLang python/sglang/srt/model_executor/model_runner.py `update_weights_from_distributed`
(`torch.distributed.broadcast(weights, src=0, group=self._model_update_group[group_name], async_op=True)` per
tensor, `for handle in handles: handle.wait()`, then `self.model.load_weights`) over the group of
`init_custom_process_group` (c10d's init_process_group copied: rendezvous, PrefixStore, `_new_process_group_helper
(world_size, rank, [], ...)`, `pg_group_ranks[pg] = {i: i}`); the trainer side of
slime's `update_weights_from_distributed` (`handles.append(dist.broadcast(param.data, 0, group, async_op=True))`),
here with the waits moved after the next step.
RULE: ProcessGroupNCCL runs an async_op=True collective on its internal stream, which waits for the current stream
only up to the call (ProcessGroupNCCL.cpp syncStream); the optimizer step launched after it on the current stream
is unordered with the broadcast's reads of `param.data` until `Work.wait()`. On a GPU the inference engine may
receive the next step's weights, or a mix.
"""
import os
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.distributed_c10d import Backend, PrefixStore, _new_process_group_helper, _world, rendezvous


def init_custom_process_group(init_method, world_size, rank, group_name):
    store, rank, world_size = next(rendezvous(init_method, rank, world_size, timeout=timedelta(minutes=5)))
    store = PrefixStore(group_name, store)
    pg, _ = _new_process_group_helper(world_size, rank, [], Backend("nccl"), store, group_name=group_name,
                                      backend_options=None, timeout=timedelta(minutes=5))
    _world.pg_group_ranks[pg] = {i: i for i in range(world_size)}
    return pg


def make_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 64))


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    update = init_custom_process_group("tcp://127.0.0.1:29732", 3, rank, "sglang_update")
    shapes = [p.shape for p in make_model().parameters()]
    if rank == 0:
        model = make_model().cuda()
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        for p in model.parameters():
            p.grad = torch.ones_like(p)
        handles = [dist.broadcast(p.data, 0, group=update, async_op=True) for p in model.parameters()]
        opt.step()                                     # BUG: the next step writes what is being sent
        for h in handles:
            h.wait()
    else:
        bufs = [torch.empty(s, device="cuda") for s in shapes]
        handles = [dist.broadcast(b, 0, group=update, async_op=True) for b in bufs]
        for h in handles:
            h.wait()
        got = torch.cat([b.reshape(-1) for b in bufs]).cpu()
        want = torch.cat([p.detach().reshape(-1) for p in make_model().parameters()])
        print(f"rank {rank}: received the weights before the step: {torch.equal(got, want)}")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
