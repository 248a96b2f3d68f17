"""torch.cuda.comm.scatter puts a chunk on GPU 1 by a copy ordered only with GPU 1's current stream; a side
stream of GPU 1 (a prefetch or compute stream made beforehand) reads the chunk without waiting for GPU 1's
current stream: nothing orders the read after the copy that writes it.

EXPECTED: hazard
KINDS: read-after-write
WORLD_SIZE: 1
DEVICE_COUNT: 2
REASON: torch/csrc/cuda/comm.cpp scatter: chunks[i].to(device_i, non_blocking=true) on the current streams (aten/src/ATen/native/cuda/Copy.cu copy_device_to_device: the destination's current stream waits for the copy, no other stream does); work on two streams is unordered without wait_stream / wait_event (https://pytorch.org/docs/stable/notes/cuda.html#cuda-streams).
"""
import torch
import torch.cuda.comm as comm


def main():
    torch.cuda.set_device(0)
    with torch.cuda.device(1):
        side1 = torch.cuda.Stream()
    x = torch.randn(1 << 12, 256, device="cuda:0")
    parts = comm.scatter(x, devices=[0, 1], dim=0)
    with torch.cuda.stream(side1):                 # BUG: no side1.wait_stream(torch.cuda.current_stream(1))
        s = parts[1].sum()
    torch.cuda.current_stream(1).wait_stream(side1)
    expected = x[x.shape[0] // 2:].sum().item()
    print(s.item(), expected)


if __name__ == "__main__":
    main()
