"""y computed on a side stream of cuda:1, then y.to("cuda:0") with no synchronization of cuda:1's current stream.

EXPECTED: hazard
KINDS: read-after-write
WORLD_SIZE: 1
DEVICE_COUNT: 2
REASON: the D2D copy is ordered on the current streams of both devices, not on the cuda:1 side stream that wrote y.
"""
import torch


def main():
    x1 = torch.randn(1 << 16, device="cuda:1")
    with torch.cuda.device(1):
        s1 = torch.cuda.Stream()
        s1.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s1):
            y = torch.sin(x1) * 2
    y0 = y.to("cuda:0")                  # BUG: cuda:1's current stream never waited on s1
    torch.cuda.synchronize(1)
    print(y0.sum().item())


if __name__ == "__main__":
    main()
