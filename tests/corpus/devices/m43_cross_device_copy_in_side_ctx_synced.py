"""The fixed m42: the side stream of cuda:0 waits for cuda:0's default stream before the copy to cuda:1; the copy
(on the side stream) is followed by cuda:1's current stream, so the consumer on cuda:1 reads the right values;
the source tensor is record_stream'ed for the side stream. A copy_ back from cuda:1 into a cuda:0 buffer
completes the round trip.

EXPECTED: clean
WORLD_SIZE: 1
DEVICE_COUNT: 2
REASON: aten/src/ATen/native/cuda/Copy.cu copy_device_to_device: the copy runs on the source's current stream after it waits for the destination's current stream, and the destination's current stream then waits for the copy (two-way barrier).
"""
import torch


def main():
    torch.cuda.set_device(0)
    a = torch.randn(1 << 16)
    x = a.to("cuda:0")
    h = torch.tanh(x) * 2
    side = torch.cuda.Stream(device=0)
    side.wait_stream(torch.cuda.current_stream(0))
    with torch.cuda.stream(side):
        h1 = h.to("cuda:1")
    h.record_stream(side)
    with torch.cuda.device(1):
        y = h1 * 3 + 1
    back = torch.empty(1 << 16, device="cuda:0")
    back.copy_(y)                              # on cuda:1's current stream (the source), barriers on both
    z = back - 1
    assert torch.allclose(z.cpu(), torch.tanh(a) * 6, rtol=1e-5, atol=1e-6)


if __name__ == "__main__":
    main()
