"""RL weight sync into a TP=2 inference engine over a second "main" process group, as OpenRLHF makes it: after
init_process_group, the trainer's rank 0 and the inference workers make a group of their own over a `tcp://`
rendezvous with c10d's `_new_process_group_helper` (rank = rank_offset + tp_rank, so the group's numbering is not
the global one) and register `pg_group_ranks = {i: i}`. World 4: ranks 0-1 train (DP=2, gradients all-reduced
over their own new_group), ranks 2-3 are the inference engine (TP=2 over their new_group). Each step the trainer
steps its optimizer, then for every parameter rank 0 broadcasts `param.data` (async_op=False) into the update
group; each worker receives into `torch.empty`, loads its TP shard (column-parallel fc1 split on dim 0,
row-parallel fc2 on dim 1, copy_), drops the buffer and empties the cache; then it runs its TP forward (an
all_reduce over the TP group) and checks it against the trainer's weights computed on the host, bit for bit
where the math is exact (the bias path) and to float rounding for the matmuls. Two sync rounds.

EXPECTED: clean
WORLD_SIZE: 4
MODELLED ON: OpenRLHF openrlhf/utils/distributed_util.py `init_process_group` (a copy of c10d's: `rendezvous(
init_method, rank, world_size)`, `PrefixStore(group_name, store)`, `_new_process_group_helper(world_size, rank, [],
backend, store, group_name=...)`, `_world.pg_group_ranks[pg] = {i: i for i in range(world_size)}`), its vLLM
worker extension openrlhf/trainer/ray/vllm_worker_wrap.py (`rank = get_rank() + rank_offset`; `update_weight`:
`weight = torch.empty(shape, dtype, device="cuda")`, `torch.distributed.broadcast(weight, 0, group=
self._model_update_group)`, `self.model_runner.model.load_weights(weights=[(name, weight)])`, `del weight`) and the
trainer side (`torch.distributed.broadcast(param.data, 0, group=self._model_update_group)` per parameter after
`torch.cuda.empty_cache()`); SGLang's `init_custom_process_group` / `update_weights_from_distributed` has the same
shape.
REASON: a synchronous broadcast orders the caller's current stream after it (torch >= 2.8: it runs there; 2.7: the
current stream waits on its end event), so the load's copy_ reads the received bytes, the freed buffer is reused
only after the copy on the same stream, and the trainer's next optimizer step writes its parameters after the
broadcast read them. The group's members are learnt from the rendezvous, not from `pg_group_ranks` (which says
{0, 1, 2} here, and no collective reads on a GPU either: NCCL's peers come from the store).
"""
import os
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.distributed_c10d import Backend, PrefixStore, _new_process_group_helper, _world, rendezvous

TRAINERS, TP = 2, 2
H, F = 32, 64


def init_update_group(init_method, world_size, rank, group_name):
    """OpenRLHF's copy of c10d's init_process_group, to make a second main group."""
    store, rank, world_size = next(rendezvous(init_method, rank, world_size, timeout=timedelta(minutes=5)))
    store.set_timeout(timedelta(minutes=5))
    store = PrefixStore(group_name, store)
    pg, _ = _new_process_group_helper(world_size, rank, [], Backend("nccl"), store, group_name=group_name,
                                      backend_options=None, timeout=timedelta(minutes=5))
    _world.pg_group_ranks[pg] = {i: i for i in range(world_size)}
    return pg


def make_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(H, F), nn.GELU(), nn.Linear(F, H))


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dp_group = dist.new_group(list(range(TRAINERS)))
    tp_group = dist.new_group(list(range(TRAINERS, TRAINERS + TP)))
    trainer = rank < TRAINERS
    update = None
    if rank == 0 or not trainer:
        group_rank = 0 if rank == 0 else 1 + (rank - TRAINERS)     # rank_offset + tp_rank
        update = init_update_group("tcp://127.0.0.1:29731", 1 + TP, group_rank, "openrlhf")
    shapes = [(n, p.shape) for n, p in make_model().named_parameters()]
    if trainer:
        model = make_model().cuda()
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        g = torch.Generator().manual_seed(100 + rank)
    else:
        tp_rank = rank - TRAINERS
        full = make_model()                                    # the engine's own (stale) weights, then sharded
        shard = {"0.weight": full[0].weight.chunk(TP, 0)[tp_rank], "0.bias": full[0].bias.chunk(TP, 0)[tp_rank],
                 "2.weight": full[2].weight.chunk(TP, 1)[tp_rank], "2.bias": full[2].bias}
        engine = {k: (v.detach() * 0 + 7).cuda() for k, v in shard.items()}   # wrong until the first sync
    for step in range(2):
        if trainer:
            x = torch.randn(8, H, generator=g).cuda()
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            for p in model.parameters():
                dist.all_reduce(p.grad, group=dp_group)
                p.grad.div_(TRAINERS)
            opt.step()
        if rank == 0:
            for name, p in model.named_parameters():
                torch.cuda.empty_cache()
                dist.broadcast(p.data, 0, group=update)
        elif not trainer:
            received = {}
            for name, shape in shapes:
                weight = torch.empty(shape, dtype=torch.float32, device="cuda")
                dist.broadcast(weight, 0, group=update)
                if name == "0.weight" or name == "0.bias":
                    engine[name].copy_(weight.chunk(TP, 0)[tp_rank])
                elif name == "2.weight":
                    engine[name].copy_(weight.chunk(TP, 1)[tp_rank])
                else:
                    engine[name].copy_(weight)
                received[name] = weight.cpu()
                del weight
                torch.cuda.empty_cache()
            xg = torch.Generator().manual_seed(7 + step)
            x = torch.randn(4, H, generator=xg)
            h = torch.nn.functional.gelu(x.cuda() @ engine["0.weight"].t() + engine["0.bias"])
            y = h @ engine["2.weight"].t()
            dist.all_reduce(y, group=tp_group)
            y = y + engine["2.bias"]
            ref = nn.Sequential(nn.Linear(H, F), nn.GELU(), nn.Linear(F, H))
            with torch.no_grad():
                for (n, q) in ref.named_parameters():
                    q.copy_(received[n])
                want = ref(x)
            torch.testing.assert_close(y.cpu(), want, rtol=1e-5, atol=1e-5)
            for n in ("0.bias", "2.bias"):
                sl = received[n].chunk(TP, 0)[tp_rank] if n == "0.bias" else received[n]
                assert torch.equal(engine[n].cpu(), sl), n
            assert not torch.equal(received["2.bias"], make_model()[2].bias.detach()), "the trainer's step moved it"
        if trainer:
            # the trainer ranks agree on their weights (DP): rank 1's must equal what rank 0 sent
            flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
            other = flat.clone()
            dist.broadcast(other, 0, group=dp_group)
            assert torch.equal(other.cpu(), flat.cpu())
    print(f"rank {rank}: 2 sync rounds done")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
