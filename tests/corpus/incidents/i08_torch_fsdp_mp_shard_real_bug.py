"""I8 with torch's own FSDP (NO_SHARD, MixedPrecision(param_dtype=float16)), with pull/91096's record_stream removed
again: FlatParamHandle._free_low_precision_sharded_param is patched back to its pull/83665 body.

EXPECTED: hazard
KINDS: reuse-after-free
INCIDENT: https://github.com/pytorch/pytorch/pull/91096 (the record_stream that pull/83665 dropped); fixed twin:
i08_torch_fsdp_mp_shard_real_fix.py; plain-torch model: tests/corpus/incidents/i08_torch_fsdp_mp_shard_bug.py.
MODELLED ON: torch/distributed/fsdp/_flat_param.py `FlatParamHandle._free_low_precision_sharded_param` (installed
torch), whose body is `self._check_low_precision_shard()`, `_no_dispatch_record_stream(self.flat_param._mp_shard,
self._device_handle.current_stream())`, `_free_storage(self.flat_param._mp_shard)`; the patch below keeps the first
and last calls, i.e. the code between pull/83665 and pull/91096.
SIMPLIFIED: as in the fixed twin.
RULE: see tests/corpus/incidents/i08_torch_fsdp_mp_shard_bug.py.
WHAT SIMDIST SAYS: reuse-after-free, observed (torch's own FSDP1 with the record_stream removed; seeds 0-4), the
plain model's verdict: between the first unit's forward (default stream) and the second unit's
`_use_low_precision_shard` copy (pre-unshard stream).
"""
import os

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, MixedPrecision, ShardingStrategy
from torch.distributed.fsdp._flat_param import FlatParamHandle, _free_storage
from torch.distributed.fsdp.wrap import ModuleWrapPolicy


def _free_low_precision_sharded_param_before_91096(self):
    self._check_low_precision_shard()
    _free_storage(self.flat_param._mp_shard)


FlatParamHandle._free_low_precision_sharded_param = _free_low_precision_sharded_param_before_91096

D = 64


def build():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(D, D, bias=False), torch.nn.Tanh(),
                               torch.nn.Linear(D, D, bias=False), torch.nn.Tanh())


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    model = FSDP(build().cuda(), sharding_strategy=ShardingStrategy.NO_SHARD,
                 mixed_precision=MixedPrecision(param_dtype=torch.float16),
                 auto_wrap_policy=ModuleWrapPolicy({torch.nn.Linear}), device_id=torch.cuda.current_device())
    x = torch.ones(8, D) / D
    with torch.no_grad():
        out = model(x.cuda()).float()
    print(f"rank {rank}: forward output sum {out.sum().item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
