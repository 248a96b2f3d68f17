"""verl-style weight sync from an FSDP2 trainer into an inference engine over a group of their own: world 3, ranks
0-1 train a 2-layer MLP with FSDP2 (`fully_shard` per Linear and on the root, a DeviceMesh over ranks [0, 1]) and
step AdamW once; rank 2 is the engine. The update group of the trainer's rank 0 and the engine is made over a
`tcp://` rendezvous with c10d's `_new_process_group_helper` (group ranks 0 and 1: the engine's numbering is not
its global rank). For every entry of the trainer's state_dict both trainer ranks call `full_tensor()` (the
DTensor all-gather over the FSDP mesh); rank 0 then broadcasts the full tensor on a side stream of its own
(which first waits for the current stream) and `record_stream`s it there before dropping it. The engine
receives into `torch.empty` and compares every tensor with the trainer's (sent by broadcast_object_list).

EXPECTED: clean
WORLD_SIZE: 3
MODELLED ON: verl's FSDP sharding managers (verl/workers/sharding_manager/fsdp_*.py: `tensor.full_tensor() if
isinstance(tensor, DTensor) else tensor` per state_dict entry before handing it to the rollout engine) with the
NCCL weight-update group of OpenRLHF / SGLang (`init_process_group` copy over `_new_process_group_helper`,
`pg_group_ranks = {i: i}`), and a side stream for the send as overlap code writes it.
REASON: full_tensor() waits its all-gather on the current stream before returning a plain tensor; the side stream
waits for the current stream before the broadcast reads it; `record_stream(side)` keeps its block from reuse
until the broadcast is done; the current stream waits for the side stream before the trainer reads again; the
engine's synchronous broadcast orders its reads.
"""
import os
from datetime import timedelta
import torch, torch.nn as nn, torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor
from torch.distributed.distributed_c10d import Backend, PrefixStore, _new_process_group_helper, _world, rendezvous

def group(url, n, r, name):
    store, r, n = next(rendezvous(url, r, n, timeout=timedelta(seconds=60)))
    pg, _ = _new_process_group_helper(n, r, [], Backend("nccl"), PrefixStore(name, store), group_name=name,
                                      backend_options=None, timeout=timedelta(seconds=60))
    _world.pg_group_ranks[pg] = {i: i for i in range(n)}
    return pg

def make():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8))

def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    mesh = DeviceMesh("cuda", [0, 1]) if rank < 2 else None
    upd = group("tcp://127.0.0.1:29900", 2, 0 if rank == 0 else 1, "verl_sync") if rank in (0, 2) else None
    names = [n for n, _ in make().named_parameters()]
    shapes = {n: p.shape for n, p in make().named_parameters()}
    if rank < 2:
        model = make().cuda()
        for m in model:
            if isinstance(m, nn.Linear):
                fully_shard(m, mesh=mesh)
        fully_shard(model, mesh=mesh)
        opt = torch.optim.AdamW(model.parameters(), lr=0.1)
        model(torch.randn(4, 16, device="cuda")).sum().backward()
        opt.step()
        sd = model.state_dict()
        side = torch.cuda.Stream()
        for n in names:
            t = sd[n]
            full = t.full_tensor() if isinstance(t, DTensor) else t
            if rank == 0:
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    dist.broadcast(full, 0, group=upd)
                full.record_stream(side)
        torch.cuda.current_stream().wait_stream(side)
        ref = {n: (sd[n].full_tensor() if isinstance(sd[n], DTensor) else sd[n]).cpu() for n in names}
        if rank == 0:
            obj = [ref]
            dist.broadcast_object_list(obj, src=0, group=upd)
    else:
        got = {}
        for n in names:
            b = torch.empty(shapes[n], device="cuda")
            dist.broadcast(b, 0, group=upd)
            got[n] = b.cpu()
        obj = [None]
        dist.broadcast_object_list(obj, src=0, group=upd)
        for n in names:
            assert torch.equal(got[n], obj[0][n]), n
        print("engine got the trained weights")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
