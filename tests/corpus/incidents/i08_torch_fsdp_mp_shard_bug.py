"""I8 PyTorch FSDP (2022), mixed precision, NO_SHARD: the low-precision shard `_mp_shard`, allocated on the
pre-unshard stream and read by the forward on the default stream, was freed without record_stream, so the next
FSDP unit's `_mp_shard` took its block while the forward still read it.

EXPECTED: hazard
KINDS: reuse-after-free
INCIDENT: https://github.com/pytorch/pytorch/pull/91096 ("[FSDP] Fix `_mp_shard` `record_stream()`", 2022): "I
dropped a needed `record_stream` call in https://github.com/pytorch/pytorch/pull/83665 ... We allocate the
`_mp_shard` in the pre-unshard stream ... For `NO_SHARD`, we consume the `_mp_shard` in the unshard stream (for
views) and in the default stream (for computation). We must call `record_stream(_mp_shard, current_stream)` when
freeing ..."; twin: i08_torch_fsdp_mp_shard_fix.py.
MODELLED ON: torch/distributed/fsdp/_runtime_utils.py (2022, 731f417) `_unshard` (`with
torch.cuda.stream(pre_unshard_stream): handle.pre_unshard()`; `unshard_stream.wait_stream(pre_unshard_stream)`;
`with torch.cuda.stream(unshard_stream): handle.unshard(); handle.post_unshard()`), `_pre_forward_unshard`
(`torch.cuda.current_stream().wait_stream(state._streams["unshard"])`), `_post_forward_reshard`, and
`_wait_for_previous_optim_step` (both FSDP streams wait for the current stream once per iteration);
torch/distributed/fsdp/flat_param.py `FlatParamHandle._use_low_precision_shard` (`_alloc_storage(flat_param._mp_shard,
...)`, `flat_param._mp_shard.copy_(flat_param._local_shard...)`, `flat_param.data = flat_param._mp_shard`),
`unshard` (NO_SHARD: no all-gather, `_use_unsharded_flat_param(self.flat_param)`), `reshard` ->
`_free_low_precision_sharded_param` (`_free_storage(flat_param._mp_shard)`; pull/91096 puts
`_no_dispatch_record_stream(flat_param._mp_shard, torch.cuda.current_stream())` before it).
SIMPLIFIED: two FSDP units of one 64x64 Linear weight each, param_dtype float16, forward only (backward would
repeat the pattern); `_alloc_storage` / `_free_storage` (storage resize) are a fresh tensor and dropping the last
reference (simdist does not model storage resize_ of device tensors: docs/dev/engine-bugs/incidents.md E3).
RULE: the caching allocator hands a freed block to the next allocation on the stream it was allocated on at once,
unless `record_stream` registered other streams that used it (c10/cuda/CUDACachingAllocator.cpp; torch.Tensor.
record_stream docs); the pre-unshard stream does not wait for the default stream between units.
WHAT SIMDIST SAYS: reuse-after-free: unit 0's matmul (default stream) reads `_mp_shard` while unit 1's
`_use_low_precision_shard` copy (pre-unshard stream) writes the same block.
"""
import os

import torch
import torch.distributed as dist

STRATEGY = "NO_SHARD"
D = 64
PARAM_DTYPE = torch.float16


class FlatParamHandle:
    def __init__(self, idx, rank, world):
        g = torch.Generator().manual_seed(idx)
        self.full = torch.randn(D, D, generator=g) / D
        self.world = world
        if STRATEGY == "NO_SHARD":
            self._local_shard = self.full.reshape(-1).cuda()
        else:
            self._local_shard = self.full.reshape(-1).chunk(world)[rank].contiguous().cuda()
        self._mp_shard = None
        self.unsharded = None

    def pre_unshard(self):                                   # _use_low_precision_shard
        self._mp_shard = torch.empty(self._local_shard.numel(), dtype=PARAM_DTYPE, device="cuda")  # _alloc_storage
        self._mp_shard.copy_(self._local_shard)
        return True

    def unshard(self):
        if STRATEGY == "NO_SHARD":
            self.unsharded = self._mp_shard                  # _use_unsharded_flat_param(self.flat_param)
            return
        self.unsharded = torch.empty(self._mp_shard.numel() * self.world, dtype=PARAM_DTYPE, device="cuda")
        dist.all_gather_into_tensor(self.unsharded, self._mp_shard)   # _all_gather_flat_param

    def post_unshard(self):
        if STRATEGY != "NO_SHARD":
            self._free_low_precision_sharded_param()

    def reshard(self):
        if STRATEGY == "NO_SHARD":
            self.unsharded = None
            self._free_low_precision_sharded_param()
        else:
            self.unsharded.record_stream(torch.cuda.current_stream())   # _free_unsharded_flat_param
            self.unsharded = None

    def _free_low_precision_sharded_param(self):
        # BUG (pull/83665 .. pull/91096): no _no_dispatch_record_stream(self._mp_shard, torch.cuda.current_stream())
        self._mp_shard = None                                # _free_storage(flat_param._mp_shard)


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    unshard_stream, pre_unshard_stream = torch.cuda.Stream(), torch.cuda.Stream()
    handles = [FlatParamHandle(i, rank, world) for i in range(2)]
    x = torch.ones(8, D, device="cuda", dtype=PARAM_DTYPE)

    unshard_stream.wait_stream(torch.cuda.current_stream())       # _wait_for_previous_optim_step
    pre_unshard_stream.wait_stream(torch.cuda.current_stream())
    for h in handles:                                             # FSDP units, in forward order
        with torch.cuda.stream(pre_unshard_stream):               # _unshard
            ran_pre_unshard = h.pre_unshard()
        if ran_pre_unshard:
            unshard_stream.wait_stream(pre_unshard_stream)
        with torch.cuda.stream(unshard_stream):
            h.unshard()
            h.post_unshard()
        torch.cuda.current_stream().wait_stream(unshard_stream)   # _pre_forward_unshard
        x = torch.tanh(x @ h.unsharded.view(D, D))                # the unit's forward, default stream
        h.reshard()                                               # _post_forward_reshard
    out = x.float()
    print(f"rank {rank}: {STRATEGY} forward output sum {out.sum().item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
