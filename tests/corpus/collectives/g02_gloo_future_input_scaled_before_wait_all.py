"""Two async gloo all_reduces of CPU metrics, their futures collected for `torch.futures.wait_all`, and one metric
scaled in place before that wait: ProcessGroupGloo's worker thread reads the input and writes the sum some time
before the future completes (the future is completed by the worker, AsyncWork::finishWorkGloo), so the mul_ races
it. Taking the future does not wait for anything; waiting the futures (or the works) before the mul_ is the fix.

EXPECTED: hazard
KINDS: write-after-read
KINDS_ALSO: host-read
WORLD_SIZE: 2
MODELLED ON: logging code that overlaps CPU metric all_reduces and waits them together with torch.futures.wait_all.
RULE: torch/csrc/distributed/c10d/ProcessGroupGloo.cpp (the work runs on a worker thread; getFuture returns the
future that finishWorkGloo completes with the outputs); torch/futures/__init__.py wait_all (waits every future).
WHAT SIMDIST SAYS: write-after-read between the gloo all_reduce and the mul_. (Before g3 nothing: the host watch of
an async gloo collective ended when get_future() was called.)
"""
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    loss_sum = torch.full((4,), float(rank + 1))
    tokens = torch.full((4,), 10.0 * (rank + 1))
    futs = [dist.all_reduce(t, async_op=True).get_future() for t in (loss_sum, tokens)]
    loss_sum.mul_(0.5)                       # BUG: the worker may not have read loss_sum yet
    torch.futures.wait_all(futs)
    print((loss_sum / tokens)[0].item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
