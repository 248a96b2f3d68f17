"""non_blocking H2D copy from a pinned buffer, then the host overwrites the pinned buffer before syncing.

EXPECTED: hazard
KINDS: write-after-read
REASON: a non_blocking copy from pinned memory is an async DMA that reads host memory later; the host must not modify the source until the copy completes.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    w = torch.randn(1024, 1024, device="cuda")
    for _ in range(8):
        w = w @ w / 32.0                   # keep the stream busy so the DMA starts late
    staging = torch.empty(1 << 14).pin_memory()
    staging.fill_(1.0)
    dev = staging.to("cuda", non_blocking=True)
    staging.fill_(2.0)                     # BUG: host write while the DMA may still read
    torch.cuda.synchronize()
    print(dev.sum().item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
