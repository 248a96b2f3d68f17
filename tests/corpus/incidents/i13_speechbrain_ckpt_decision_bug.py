"""I13 SpeechBrain DDP: each rank decided from its own wall clock whether to save an intra-epoch checkpoint, so one
rank entered the checkpoint's barrier while the other ran the next batch's DDP buffer broadcast.

EXPECTED: error
ERROR: CollectiveMismatch
INCIDENT: https://github.com/speechbrain/speechbrain/issues/1166 ("Checkpointing may cause the NCCL error", 2021,
torch 1.10, speechbrain 0.5.9): "RuntimeError: Detected mismatch between collectives on ranks. Rank 0 is running
inconsistent collective: CollectiveFingerPrint(OpType=BROADCAST, TensorShape=[4], ...)", raised in DDP's
`dist._broadcast_coalesced`, only with `ckpt_interval_minutes` > 0. First fix https://github.com/speechbrain/
speechbrain/pull/1167 (no barrier for intra-epoch checkpoints); the decision itself was made collective by
https://github.com/speechbrain/speechbrain/pull/2192 ("Broadcast the decision to checkpoint to all processes",
commit 4ab5219; twin: i13_speechbrain_ckpt_decision_fix.py).
MODELLED ON: speechbrain/core.py at 2e78d2c (0.5.9), `Brain.fit`: `last_ckpt_time = time.time()`; per batch
`loss = self.fit_batch(batch)` (DDP forward: with broadcast_buffers the module buffers are broadcast from rank 0,
then backward all-reduces the gradients), then `if self.checkpointer is not None and self.ckpt_interval_minutes > 0
and time.time() - last_ckpt_time >= self.ckpt_interval_minutes * 60.0: run_on_main(self._save_intra_epoch_ckpt)`;
speechbrain/utils/distributed.py `run_on_main` (main process: `func()` then `ddp_barrier()`; others:
`ddp_barrier()`) and `ddp_barrier` (`torch.distributed.barrier()`).
SIMPLIFIED: each rank's `time.time()` is a simulated clock advancing by that rank's step time (rank 0, which also
logs and draws the progress bar, takes 1.0 s per batch, rank 1 0.9 s), so the run is deterministic; DDP's buffer
broadcast and gradient all-reduce are written as `dist.broadcast` / `dist.all_reduce` of a BatchNorm-sized buffer
and a flat gradient; saving the checkpoint is a host copy of the parameters.
RULE: every rank must issue the same collectives in the same order (torch.distributed docs; NCCL matches
collectives by order, and TORCH_DISTRIBUTED_DEBUG=DETAIL checks the fingerprints, which produced the error above).
WHAT SIMDIST SAYS: CollectiveMismatch at the step where rank 0's clock passes the interval and rank 1's does not:
rank 0's barrier (run_on_main) against rank 1's next DDP buffer broadcast, with both call sites.
"""
import os

import torch
import torch.distributed as dist

CKPT_INTERVAL_MINUTES = 0.05          # 3 s
STEP_SECONDS = [1.0, 0.9]             # per-rank wall time of one batch
STEPS = 6


class Clock:
    """time.time() on this rank (simulated, see SIMPLIFIED)."""

    def __init__(self, rank):
        self.rank, self.now = rank, 1000.0

    def time(self):
        return self.now

    def advance(self):
        self.now += STEP_SECONDS[self.rank]


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    time = Clock(rank)
    weight = torch.zeros(16, device="cuda")
    running_mean = torch.zeros(4, device="cuda")                 # a BatchNorm buffer, TensorShape=[4]
    saved = []

    def save_intra_epoch_ckpt():                                 # Brain._save_intra_epoch_ckpt
        saved.append(weight.cpu())

    def run_on_main(func):                                       # speechbrain.utils.distributed.run_on_main
        if rank == 0:
            try:
                func()
            finally:
                dist.barrier()                                   # ddp_barrier()
        else:
            dist.barrier()

    last_ckpt_time = time.time()
    for step in range(STEPS):
        # fit_batch: DDP forward (buffer broadcast), backward (gradient all-reduce), optimizer step
        dist.broadcast(running_mean, src=0)                      # DDP._sync_buffers -> _broadcast_coalesced
        grad = torch.full((16,), float(rank + step), device="cuda")
        dist.all_reduce(grad)
        weight.sub_(grad, alpha=0.01 / world)
        running_mean.add_(0.1)
        time.advance()
        if CKPT_INTERVAL_MINUTES > 0 and time.time() - last_ckpt_time >= CKPT_INTERVAL_MINUTES * 60.0:
            run_on_main(save_intra_epoch_ckpt)                   # BUG: each rank decides from its own clock
            last_ckpt_time = time.time()
    torch.cuda.synchronize()
    print(f"rank {rank}: weight sum {weight.sum().item():.4f}, checkpoints saved {len(saved)}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
