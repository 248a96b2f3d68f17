"""RL weight refit over a trainer-to-inference NCCL group, as slime / AReaL-style `update_weights_from_distributed`
writes it: the trainer (rank 0) walks its parameters, calls `torch.cuda.empty_cache()`, makes
`param.data.contiguous()` (a temporary for the transposed weights), broadcasts it with `async_op=True` and drops
its own reference at the next iteration; all handles are waited only at the end. The inference engine (rank 1)
allocates `torch.empty` receive buffers, posts the matching async broadcasts, waits them all, then loads them into
its model (`copy_`). The trainer's next optimizer step then writes its parameters. Values checked on rank 1.

EXPECTED: clean
WORLD_SIZE: 2
MODELLED ON: the weight-sync loops of slime (slime/backends/megatron_utils/update_weight/
update_weight_from_distributed.py: `handles.append(dist.broadcast(param.data, 0, group=self._model_update_groups,
async_op=True))`, then `for handle in handles: handle.wait()`) and of FSDP-based trainers that broadcast
`param.data.contiguous()` after `torch.cuda.empty_cache()`; the receiving side of vLLM / SGLang's
`update_weights_from_distributed` (`torch.empty(shape, dtype, device)`, broadcast, `model.load_weights`).
REASON: ProcessGroupNCCL keeps an async collective's tensors alive until the Work is waited (torch >= 2.8: stashed
in the Work, ProcessGroupNCCL.cpp `stashed_for_allocator_safety_`; torch 2.7: record_stream on the NCCL stream), so
dropping the temporary and emptying the cache do not free its block while the broadcast reads it; `Work.wait()`
orders the current stream after each broadcast before rank 1 reads the buffers, and before rank 0's optimizer
step writes the parameters it broadcast.
"""
import os

import torch
import torch.distributed as dist
import torch.nn as nn


def make_model(seed):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 32))


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    group = dist.new_group([0, 1])                   # the model-update group
    trainer = make_model(0).cuda()
    engine = make_model(1).cuda()                    # other weights until the refit
    names = [n for n, _ in trainer.named_parameters()]
    handles, received = [], []
    if rank == 0:
        for name, p in trainer.named_parameters():
            torch.cuda.empty_cache()
            data = p.data.t().contiguous() if p.dim() == 2 else p.data.contiguous()   # a fresh temporary
            handles.append(dist.broadcast(data, 0, group=group, async_op=True))
        del data
        for h in handles:
            h.wait()
        opt = torch.optim.SGD(trainer.parameters(), lr=0.1)
        for p in trainer.parameters():
            p.grad = torch.ones_like(p)
        opt.step()                                   # writes the parameters just sent
    else:
        for name, p in engine.named_parameters():
            shape = p.shape[::-1] if p.dim() == 2 else p.shape
            buf = torch.empty(shape, dtype=p.dtype, device="cuda")
            handles.append(dist.broadcast(buf, 0, group=group, async_op=True))
            received.append(buf)
        for h in handles:
            h.wait()
        with torch.no_grad():                        # load_weights
            for (name, p), buf in zip(engine.named_parameters(), received):
                p.copy_(buf.t() if p.dim() == 2 else buf)
        ref = make_model(0)
        for (name, p), (_, q) in zip(engine.named_parameters(), ref.named_parameters()):
            assert torch.equal(p.detach().cpu(), q.detach()), name
    assert len(names) == 4
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
