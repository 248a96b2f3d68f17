"""I8 PyTorch FSDP (2022), mixed precision, FULL_SHARD, without pull/91096's record_stream: under the NCCL semantics
of its era (torch <= 2.7) the all-gather's read of `_mp_shard` was protected by ProcessGroupNCCL's own
record_stream, so this "buggy" program is clean; under torch >= 2.8 semantics it is not.

EXPECTED: clean
NCCL: 2.7
INCIDENT: https://github.com/pytorch/pytorch/pull/91096 ("[FSDP] Fix `_mp_shard` `record_stream()`", 2022): "For
sharded strategies, we consume the `_mp_shard` only in the unshard stream (for all-gather)"; fixed twin:
i08_torch_fsdp_mp_shard_fullshard_fix.py; the NO_SHARD path, where the missing record_stream was reachable under
both semantics: i08_torch_fsdp_mp_shard_bug.py.
MODELLED ON: as i08_torch_fsdp_mp_shard_bug.py, with FULL_SHARD: `FlatParamHandle.unshard` allocates the padded
unsharded flat parameter on the unshard stream and calls `_all_gather_flat_param` (`dist.all_gather_into_tensor(
padded_unsharded_flat_param, sharded_flat_param, self.process_group)`, synchronous); `post_unshard` frees `_mp_shard`
on the unshard stream; `reshard` records the current stream on the unsharded parameter (`_free_unsharded_flat_param`).
SIMPLIFIED: as in i08_torch_fsdp_mp_shard_bug.py.
RULE: torch <= 2.7 ProcessGroupNCCL runs the collective on its internal stream (after waiting for the current one)
and `recordStream`s the input there, so the caching allocator does not reuse `_mp_shard`'s block before the
all-gather has read it (ProcessGroupNCCL.cpp of torch 2.7, `collective()`; ../shared/FACTS.md "PyTorch semantics").
torch >= 2.8 runs a synchronous collective on the current stream with no record_stream (pull/148590 removed them),
and then the next unit's `_mp_shard` on the pre-unshard stream can take the block while the all-gather on the unshard
stream still reads it.
WHAT SIMDIST SAYS: clean under NCCL profile 2.7 (this file); reuse-after-free under 2.8 (tests/test_incidents.py
runs both). FSDP1 kept the record_stream of pull/91096, so torch >= 2.8 never shipped this combination.
"""
import os

import torch
import torch.distributed as dist

STRATEGY = "FULL_SHARD"
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
    ref = torch.ones(8, D, dtype=PARAM_DTYPE)                     # reference: the same forward on the CPU
    for h in handles:
        ref = torch.tanh(ref.float() @ h.full.to(PARAM_DTYPE).float()).to(PARAM_DTYPE)
    assert torch.allclose(out.cpu(), ref.float(), atol=2e-2), "forward output wrong"
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
