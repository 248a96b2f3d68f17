"""I8 PyTorch FSDP (2022), mixed precision, NO_SHARD, fixed as in pull/91096: `_mp_shard` records the current
stream before it is freed.

EXPECTED: clean
INCIDENT: https://github.com/pytorch/pytorch/pull/91096 ("[FSDP] Fix `_mp_shard` `record_stream()`", 2022); twin of
i08_torch_fsdp_mp_shard_bug.py (same program, the fix added).
MODELLED ON: torch/distributed/fsdp/flat_param.py after pull/91096, `_free_low_precision_sharded_param`:
`_no_dispatch_record_stream(self.flat_param._mp_shard, torch.cuda.current_stream())` then `_free_storage(...)`
("For `NO_SHARD`, only recording for the default stream suffices since the default stream waits for the unshard
stream").
SIMPLIFIED: as in the buggy twin.
RULE: `Tensor.record_stream(s)` defers the block's reuse until the work queued on `s` at the free is done
(torch.Tensor.record_stream docs; c10/cuda/CUDACachingAllocator.cpp).
WHAT SIMDIST SAYS: clean; the program checks the forward output against the same forward on the CPU.
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
        # FIX (pull/91096): the stream that consumed the shard last is recorded before the free
        self._mp_shard.record_stream(torch.cuda.current_stream())   # _no_dispatch_record_stream
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
