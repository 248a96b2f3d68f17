"""nn.DataParallel fed a CPU batch: Scatter copies each chunk host-to-device on a background copy stream per
device (torch/nn/parallel/_functions.py _get_stream), then makes each device's current stream wait for it and
record_stream's the chunk there before the replicas run; the outputs equal the CPU module's.

EXPECTED: clean
WORLD_SIZE: 1
DEVICE_COUNT: 2
REASON: torch/nn/parallel/_functions.py Scatter.forward: `streams = [_get_stream(torch.device(device)) for device in target_gpus]` when input_device == -1, comm.scatter(..., streams), then main_stream.wait_stream(streams[i]) and output.record_stream(main_stream); torch/csrc/cuda/comm.cpp scatter runs each copy under a guard of streams[i].
"""
import copy

import torch
import torch.nn as nn


def main():
    torch.cuda.set_device(0)
    torch.manual_seed(1)
    ref = nn.Sequential(nn.Linear(12, 24), nn.GELU(), nn.Linear(24, 3))
    dp = nn.DataParallel(copy.deepcopy(ref).cuda(), device_ids=[0, 1])
    for _ in range(2):
        x = torch.randn(10, 12)                     # stays on the host: Scatter moves it
        out = dp(x)
        assert out.device == torch.device("cuda", 0)
        assert torch.allclose(out.detach().cpu(), ref(x).detach(), rtol=1e-5, atol=1e-6)


if __name__ == "__main__":
    main()
