"""The bug twin of m46: the host prints (logs) one per-parameter view of the flat pinned buffer before the
synchronize; printing reads the bytes the D2H copy may not have written yet.

EXPECTED: hazard
KINDS: host-read
WORLD_SIZE: 1
REASON: a non_blocking D2H copy into pinned memory returns before it completes (https://pytorch.org/tutorials/intermediate/pinmem_nonblock.html); print formats the values (torch/_tensor_str.py), a host read.
"""
import torch


def main():
    torch.cuda.set_device(0)
    bucket = torch.randn(64 * 32 + 64, device="cuda") * 2
    flat = torch.empty(bucket.numel(), pin_memory=True)
    flat.copy_(bucket, non_blocking=True)
    bias = flat[64 * 32:]
    print(bias[:4])                            # BUG: read before the synchronize
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
