"""One process, two GPUs (pipeline stage hand-off as in torch's Pipe / naive model parallel): the activation is
produced on cuda:0's default stream, then moved to cuda:1 inside a side-stream context of cuda:0 that never
waited for the default stream. The cross-device copy runs on the source device's current stream (the side
stream), so it may read the activation before it is written.

EXPECTED: hazard
KINDS: read-after-write
WORLD_SIZE: 1
DEVICE_COUNT: 2
REASON: aten/src/ATen/native/cuda/Copy.cu copy_device_to_device: "We always perform the copy on the source device, using the current stream on the source device" after a barrier with the destination's current stream only; the source's other streams are not waited for.
"""
import torch


def main():
    torch.cuda.set_device(0)
    x = torch.randn(1 << 16, device="cuda:0")
    h = torch.tanh(x) * 2                     # default stream of cuda:0
    side = torch.cuda.Stream(device=0)
    with torch.cuda.stream(side):
        h1 = h.to("cuda:1")                   # BUG: side never waited for cuda:0's default stream
    with torch.cuda.device(1):
        out = h1.sum()
    print(out.item())


if __name__ == "__main__":
    main()
