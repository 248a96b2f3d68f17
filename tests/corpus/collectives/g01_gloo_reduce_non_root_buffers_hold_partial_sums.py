"""Statistics reduced to rank 0 over a gloo group, then each rank reuses "its own" buffer: on gloo the buffer passed
to `dist.reduce` is the collective's input and output on every rank. ProcessGroupGloo's reduce runs gloo::reduce
(a ring reduce-scatter, then each rank's chunk sent to the root) with the tensor as its only buffer, so after the
call the non-root ranks hold the ring's partial reductions (at 3 ranks and a small tensor, rank 1 holds x1 + x2,
rank 2 its own x2), and the root's float sum is associated in the ring's order, x0 + (x1 + x2), not in rank
order: with x = (1, 1e8, -1e8) the root gets 1.0 where ((x0 + x1) + x2) is 0.0 in float32.

EXPECTED: clean
WORLD_SIZE: 3
MODELLED ON: evaluation loops that `dist.reduce` a CPU metric to rank 0 and then log or reuse the local value.
RULE: torch/csrc/distributed/c10d/ProcessGroupGloo.cpp AsyncReduceWork (setOutput only, gloo::reduce), gloo's
gloo/reduce.cc (in == out when no input is set; the ring and the gather to the root). Measured with torch 2.13's
gloo on this machine (torchrun, 3 ranks): the values asserted below.
WHAT SIMDIST SAYS: clean. (Before g1, the non-root buffers were left unchanged and the root's sum was taken in rank
order: the asserts failed.)
"""
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    stats = torch.tensor([1.0, 2.0]) * (rank + 1) + 10 * rank    # (1, 2), (12, 14), (23, 26)
    dist.reduce(stats, dst=0)
    assert stats.tolist() == [[36.0, 42.0], [35.0, 40.0], [23.0, 26.0]][rank], (rank, stats)
    x = torch.tensor([[1.0], [1e8], [-1e8]][rank])
    dist.reduce(x, dst=0)
    assert x.item() == [1.0, 0.0, -1e8][rank], (rank, x)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
