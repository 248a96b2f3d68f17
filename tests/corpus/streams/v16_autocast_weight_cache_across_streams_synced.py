"""The fix of v15: the default stream waits for the side stream before its own use of the parameter inside the
same autocast region, so the cached fp16 weight the side stream's cast wrote is ordered before its reader; both
outputs equal a CPU computation with the same fp16 rounding.

EXPECTED: clean
WORLD_SIZE: 1
REASON: aten/src/ATen/autocast_mode.cpp cached_cast (one cached cast per parameter per autocast region, made on the stream of its first use); Stream.wait_stream orders later work after the other stream's queued work (https://pytorch.org/docs/stable/notes/cuda.html#cuda-streams).
"""
import torch
import torch.nn as nn


def main():
    torch.cuda.set_device(0)
    torch.manual_seed(0)
    lin = nn.Linear(256, 128)
    x = torch.randn(32, 256)
    gpu = nn.Linear(256, 128).cuda()
    gpu.load_state_dict(lin.state_dict())
    xd = x.cuda()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.autocast("cuda", dtype=torch.float16):
        with torch.cuda.stream(side):
            y1 = gpu(xd)
        torch.cuda.current_stream().wait_stream(side)
        y2 = gpu(xd)
        assert y1.dtype == y2.dtype == torch.float16
    y1.record_stream(torch.cuda.current_stream())
    ref = (x.half().float() @ lin.weight.half().float().t() + lin.bias.half().float())
    for y in (y1, y2):
        assert torch.allclose(y.float().cpu(), ref, rtol=2e-3, atol=2e-2), (y.float().cpu() - ref).abs().max()


if __name__ == "__main__":
    main()
