"""The incident in miniature: TP=2, a blockwise-FP8 weight dequantized on a side stream, then gathered.

    python examples/incident.py          # prints the hazard report and writes incident.trace.json
"""
import torch
import torch.distributed as dist

import simdist


def refit_one_weight(fix: bool = False):
    rank = dist.get_rank()
    g = torch.Generator().manual_seed(rank)
    data = torch.randn(256, 256, generator=g).to(torch.float8_e4m3fn).cuda()   # this rank's FP8 shard
    scale_inv = (torch.rand(2, 2, generator=g) + 0.5).cuda()                  # one scale per 128x128 tile
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):                                             # dequantize off the main stream
        tiles = data.view(2, 128, 2, 128).float() * scale_inv[:, None, :, None]
        weight = tiles.reshape(256, 256).to(torch.bfloat16)
    if fix:
        torch.cuda.current_stream().wait_stream(side)
        weight.record_stream(torch.cuda.current_stream())
    full = torch.empty(512, 256, dtype=torch.bfloat16, device="cuda")
    dist.all_gather_into_tensor(full, weight)                                 # TP gather on NCCL
    return full


if __name__ == "__main__":
    res = simdist.run(refit_one_weight, world_size=2, seed=1)
    print(res.report())
    res.save_trace("incident.trace.json")
    fixed = simdist.run(refit_one_weight, world_size=2, seed=1, kwargs={"fix": True})
    print("with the fix:", "clean" if not fixed.hazards else fixed.report())
