"""Debugging a model-parallel script with CUDA_LAUNCH_BLOCKING=1: activations are cast and moved from cuda:0 to
cuda:1 (`x.to("cuda:1", dtype=torch.bfloat16)`), and a side stream of cuda:1 reduces them without waiting for
cuda:1's current stream. ATen's copy_device_to_device runs a cast between devices as a copy kernel on the source
device (not one cudaMemcpyAsync), and under CUDA_LAUNCH_BLOCKING=1 every kernel launch returns when the kernel
has run, so the side stream's kernel, launched later, is ordered after the copy through the host. Without the
variable it is a read-after-write (cuda:1's current stream waits for the copy, the side stream does not).

EXPECTED: clean
WORLD_SIZE: 1
DEVICE_COUNT: 2
MODELLED ON: the "For debugging consider passing CUDA_LAUNCH_BLOCKING=1" advice applied to a two-GPU pipeline.
RULE: aten/src/ATen/native/cuda/Copy.cu copy_device_to_device (memcpy_eligible needs the same dtype; else a copy
kernel on the source device's current stream; the destination's current stream then waits for it);
https://pytorch.org/docs/stable/notes/cuda.html#asynchronous-execution (CUDA_LAUNCH_BLOCKING=1), measured on an
H200 for kernels (notes c3).
WHAT SIMDIST SAYS: clean. (Before g5 a read-after-write: the cross-device copy never blocked the host.)
"""
import os

os.environ["CUDA_LAUNCH_BLOCKING"] = "1"

import torch  # noqa: E402


def main():
    x = torch.randn(256, 256, device="cuda:0")
    h = torch.relu(x)                                   # stage 0 on cuda:0
    y = h.to("cuda:1", dtype=torch.bfloat16)            # a cast across devices: a copy kernel on cuda:0
    side = torch.cuda.Stream(device=1)
    with torch.cuda.stream(side):
        s = y.float().sum()                             # no wait_stream: the copy has run when .to() returned
    torch.cuda.synchronize(1)
    ref = h.to(torch.bfloat16).float().sum()
    assert torch.allclose(s.cpu(), ref.cpu(), rtol=1e-3), (s, ref)


if __name__ == "__main__":
    main()
