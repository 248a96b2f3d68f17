"""CUDA_LAUNCH_BLOCKING=1 makes kernel launches wait, not host-device cudaMemcpyAsync: a device-to-host
copy_(non_blocking=True) into pinned memory still returns before the copy has run, so reading the pinned buffer on
the host without a synchronize races the copy even with the variable set (the kernels before it have all run).

EXPECTED: hazard
KINDS: host-read
WORLD_SIZE: 1
MODELLED ON: debugging a wrong value with CUDA_LAUNCH_BLOCKING=1 in a loop that stages results to pinned memory.
RULE: https://pytorch.org/docs/stable/notes/cuda.html#asynchronous-execution (CUDA_LAUNCH_BLOCKING forces
synchronous kernel launches) and #use-pinned-memory-buffers (a non_blocking copy from device to pinned memory is
asynchronous with respect to the host); measured on an H200 (ci/gpu_c_facts.py): with the variable, a pinned
copy_(non_blocking=True) returned with its stream still busy (query() False), while a launched kernel had run.
WHAT SIMDIST SAYS: host-read (a regression guard for c3: only kernels block under the variable).
"""
import os

os.environ["CUDA_LAUNCH_BLOCKING"] = "1"

import torch  # noqa: E402


def main():
    torch.cuda.set_device(0)
    n = 1 << 20
    x = torch.arange(n, dtype=torch.float32, device="cuda") * 2      # kernels: they have run
    host = torch.empty(n, pin_memory=True)
    host.copy_(x, non_blocking=True)                                  # a memcpy: it has not, necessarily
    print(host[-1].item())                                            # BUG: no synchronize


if __name__ == "__main__":
    main()
