"""CUDA_LAUNCH_BLOCKING=1, set before CUDA is initialized (here at the top of the script): every kernel launch
returns only when the kernel has run, so a side stream's kernel reading what a default-stream kernel wrote just
before, and the default stream's kernel reading the side stream's result, are ordered through the host without
any wait_stream or event. The values equal a CPU run's. Without the variable, the same program is the
read-after-write of streams p03.

EXPECTED: clean
WORLD_SIZE: 1
MODELLED ON: the debugging advice printed with every asynchronously reported CUDA error ("For debugging consider
passing CUDA_LAUNCH_BLOCKING=1").
RULE: https://pytorch.org/docs/stable/notes/cuda.html#asynchronous-execution ("you can force synchronous
computation by setting environment variable CUDA_LAUNCH_BLOCKING=1"); an H200 with torch 2.11: a _sleep kernel's
stream answers query() True right after the launch with the variable, False without it, also when the variable
is set after `import torch` and before the first CUDA call.
WHAT SIMDIST SAYS: clean (before c02 it ignored the variable and reported two read-after-writes).
"""
import os

os.environ["CUDA_LAUNCH_BLOCKING"] = "1"

import torch  # noqa: E402


def main():
    torch.cuda.set_device(0)
    side = torch.cuda.Stream()
    n = 1 << 16
    x = torch.arange(n, dtype=torch.float32, device="cuda")
    with torch.cuda.stream(side):
        y = x * 2                   # reads x, written by the default stream's kernel: it has run
    z = y + 1                       # reads y, written on side: it has run
    y.record_stream(torch.cuda.current_stream())
    want = torch.arange(n, dtype=torch.float32) * 2 + 1
    assert torch.equal(z.cpu(), want)


if __name__ == "__main__":
    main()
