"""Metrics logged with tensor.to("cpu", non_blocking=True).numpy() and no synchronize (a common logging shortcut):
the host reads the pinned result before the D2H copy has run.

EXPECTED: hazard
KINDS: host-read
WORLD_SIZE: 1
REASON: a non_blocking D2H copy returns before the copy completes (the output is pinned memory); reading it on the host needs a synchronize (https://pytorch.org/tutorials/intermediate/pinmem_nonblock.html, "the host may read garbage").
"""
import torch


def main():
    torch.cuda.set_device(0)
    x = torch.randn(1 << 16, device="cuda")
    y = torch.softmax(x, dim=0) * 10
    host = y.to("cpu", non_blocking=True)
    arr = host.numpy()                    # BUG: no synchronize before the host reads
    print(float(arr.sum()))
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
