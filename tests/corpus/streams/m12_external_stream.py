"""torch.cuda.ExternalStream wraps a cudaStream_t made outside torch (CuPy, TensorRT, a custom extension): there
is no such stream in a simulated world, so it must be refused by name.

EXPECTED: error
ERROR: UnsupportedOperation
WORLD_SIZE: 1
REASON: torch/cuda/streams.py ExternalStream(stream_ptr): a raw CUDA stream handle, which simdist cannot simulate.
"""
import torch


def main():
    torch.cuda.set_device(0)
    s = torch.cuda.ExternalStream(0x1234)
    with torch.cuda.stream(s):
        y = torch.ones(4, device="cuda") * 2
    print(y.sum().item())


if __name__ == "__main__":
    main()
