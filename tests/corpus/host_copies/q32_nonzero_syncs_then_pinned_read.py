"""A non_blocking D2H copy into pinned memory on the default stream, then torch.nonzero on the default stream
(which synchronizes the host with that stream), then the host reads the pinned buffer.

EXPECTED: clean
REASON: nonzero copies its count to the host and calls cudaStreamSynchronize on the current stream (ATen Nonzero.cu), so the earlier copy on the same stream is complete.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    a = torch.randn(1 << 14)
    x = a.cuda() * 2
    host = torch.empty(1 << 14, pin_memory=True)
    host.copy_(x, non_blocking=True)
    n = torch.nonzero(x > 0).shape[0]
    assert torch.equal(host, a * 2)
    assert n == int((a > 0).sum())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
