"""TORCH_NCCL_BLOCKING_WAIT=1 set before init_process_group: every wait() of an NCCL Work blocks the host until the
collective has completed, and a synchronous collective's Python call waits its Work, so a side stream's kernel
launched after `dist.all_reduce(buf)` returns is ordered after the all_reduce without any wait_stream. The same
program without the variable races (the side stream never waits for the NCCL work; collectives p64 / p26).

EXPECTED: clean
WORLD_SIZE: 2
MODELLED ON: debugging set-ups that export TORCH_NCCL_BLOCKING_WAIT=1 (torch.distributed's environment variables).
RULE: https://pytorch.org/docs/stable/distributed.html (TORCH_NCCL_BLOCKING_WAIT: "the process will block and wait
for collectives to complete"); torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp: the constructor reads
`blockingWait_ = getCvarBool(TORCH_NCCL_BLOCKING_WAIT, false)`, WorkNCCL::wait: "In case of blockingWait or a
timeout value is specified by the user, we block the CPU thread until the work is completed or timed out";
torch/distributed/distributed_c10d.py all_reduce: `work.wait()` when not async_op.
WHAT SIMDIST SAYS: clean (before c01 it reported a read-after-write: the variable was ignored).
"""
import os

os.environ["TORCH_NCCL_BLOCKING_WAIT"] = "1"

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    side = torch.cuda.Stream()
    n = 1 << 16
    buf = torch.full((n,), float(rank + 1), device="cuda")
    side.wait_stream(torch.cuda.current_stream())      # side is ordered after buf's fill
    dist.all_reduce(buf)                               # returns once the host saw it complete
    with torch.cuda.stream(side):
        out = buf * 2                                  # no wait_stream on the NCCL work: the host wait orders it
    torch.cuda.current_stream().wait_stream(side)
    out.record_stream(torch.cuda.current_stream())
    want = 2.0 * sum(r + 1 for r in range(dist.get_world_size()))
    assert out.sum().item() == want * n, out[:4]
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
