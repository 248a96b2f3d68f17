"""I13 SpeechBrain DDP, fixed as in pull/2192: rank 0 decides whether to save an intra-epoch checkpoint and
broadcasts the decision, so every rank enters the checkpoint's barrier at the same step.

EXPECTED: clean
INCIDENT: https://github.com/speechbrain/speechbrain/issues/1166, fix https://github.com/speechbrain/speechbrain/
pull/2192 (commit 4ab5219); twin of i13_speechbrain_ckpt_decision_bug.py (same program, the fix applied).
MODELLED ON: speechbrain/core.py at 4ab5219, `Brain._should_save_intra_epoch_ckpt`: `elapsed_minutes =
(time.time() - last_ckpt_time) / 60.0; decision = 0 < self.ckpt_interval_minutes < elapsed_minutes`, then "broadcast
decision to all processes from main (rank 0)": `broadcast_list = [decision];
torch.distributed.broadcast_object_list(broadcast_list, src=0); return broadcast_list[0]`.
SIMPLIFIED: as in the buggy twin.
RULE: an object collective is itself a collective every rank issues at the same point (torch.distributed
`broadcast_object_list`), so the decision, and the barrier that follows it, line up on all ranks.
WHAT SIMDIST SAYS: clean; each rank checks its weights and the number of checkpoints rank 0 saved.
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


def should_save_intra_epoch_ckpt(time, last_ckpt_time):
    """Brain._should_save_intra_epoch_ckpt after pull/2192."""
    elapsed_minutes = (time.time() - last_ckpt_time) / 60.0
    decision = 0 < CKPT_INTERVAL_MINUTES < elapsed_minutes
    # FIX: broadcast the decision to all processes from main (rank 0)
    broadcast_list = [decision]
    dist.broadcast_object_list(broadcast_list, src=0)
    return broadcast_list[0]


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
        if should_save_intra_epoch_ckpt(time, last_ckpt_time):
            run_on_main(save_intra_epoch_ckpt)
            last_ckpt_time = time.time()
    torch.cuda.synchronize()
    print(f"rank {rank}: weight sum {weight.sum().item():.4f}, checkpoints saved {len(saved)}")
    ref = -0.01 / world * sum(sum(float(r + s) for r in range(world)) for s in range(STEPS))
    assert abs(weight.sum().item() - 16 * ref) < 1e-3, weight.sum().item()
    assert len(saved) == (1 if rank == 0 else 0), len(saved)   # rank 0's clock decided one save for everyone
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
