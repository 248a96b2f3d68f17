"""Autocast caches the half-precision copy of a parameter the first time an op casts it inside an autocast
region, and later ops of the region reuse that copy. The first use is on a side stream (an overlapped branch
that waited for the default stream), so the cast kernel writing the cached copy runs there; the second use, on
the default stream, reads the cached copy without waiting for the side stream: a race on the cached weight.

EXPECTED: hazard
KINDS: read-after-write
WORLD_SIZE: 1
REASON: aten/src/ATen/autocast_mode.cpp cached_cast: a leaf tensor that requires grad is cast once per autocast region (get_cached_casts keyed by the tensor, kept until the outermost region exits, torch.is_autocast_cache_enabled()); the cast runs on the stream current at that first use; work on two streams is unordered without wait_stream / wait_event (https://pytorch.org/docs/stable/notes/cuda.html#cuda-streams).
"""
import torch
import torch.nn as nn


def main():
    torch.cuda.set_device(0)
    torch.manual_seed(0)
    lin = nn.Linear(512, 512).cuda()
    x = torch.randn(64, 512, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.autocast("cuda", dtype=torch.float16):
        with torch.cuda.stream(side):
            y1 = lin(x)                           # casts lin.weight: the cached fp16 copy is written on side
        y2 = lin(x)                               # BUG: reads the cached copy on the default stream, no wait
    torch.cuda.current_stream().wait_stream(side)
    print(y1.float().sum().item(), y2.float().sum().item())


if __name__ == "__main__":
    main()
