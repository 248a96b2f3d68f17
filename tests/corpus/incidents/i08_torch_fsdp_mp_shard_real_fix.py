"""I8 with torch's own FSDP (FullyShardedDataParallel, NO_SHARD, MixedPrecision(param_dtype=float16)): two FSDP units,
forward; `_free_low_precision_sharded_param` records the current stream before freeing `_mp_shard` (pull/91096).

EXPECTED: clean
INCIDENT: https://github.com/pytorch/pytorch/pull/91096; plain-torch model: tests/corpus/incidents/
i08_torch_fsdp_mp_shard_{bug,fix}.py; the same program with the record_stream removed again:
i08_torch_fsdp_mp_shard_real_bug.py.
MODELLED ON: torch/distributed/fsdp/_flat_param.py `FlatParamHandle._use_low_precision_shard` /
`_free_low_precision_sharded_param` and torch/distributed/fsdp/_runtime_utils.py `_unshard` (as installed).
SIMPLIFIED: two Linear(64, 64, bias=False) units wrapped by ModuleWrapPolicy, forward only.
RULE: see the corpus programs (record_stream defers the block's reuse past the default stream's forward).
WHAT SIMDIST SAYS: clean (torch's own FSDP1 as installed; seeds 0-4); on a GPU clean.
"""
import os

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, MixedPrecision, ShardingStrategy
from torch.distributed.fsdp.wrap import ModuleWrapPolicy

D = 64


def build():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(D, D, bias=False), torch.nn.Tanh(),
                               torch.nn.Linear(D, D, bias=False), torch.nn.Tanh())


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    ref = build()
    model = FSDP(build().cuda(), sharding_strategy=ShardingStrategy.NO_SHARD,
                 mixed_precision=MixedPrecision(param_dtype=torch.float16),
                 auto_wrap_policy=ModuleWrapPolicy({torch.nn.Linear}), device_id=torch.cuda.current_device())
    x = torch.ones(8, D) / D
    with torch.no_grad():
        out = model(x.cuda()).float()
    h = x.half().float()
    for layer in (ref[0], ref[2]):                         # reference: the fp16 forward on the CPU
        h = torch.tanh(h @ layer.weight.detach().half().float().t()).half().float()
    print(f"rank {rank}: forward output sum {out.sum().item():.4f}")
    assert torch.allclose(out.cpu(), h, atol=2e-2), "forward output wrong"
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
