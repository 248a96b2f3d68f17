"""The bug twin of m02: the inner stream of a nested context reads what the outer stream produced, and nobody
made the inner stream wait for the outer one (entering a stream context orders nothing).

EXPECTED: hazard
KINDS: read-after-write
WORLD_SIZE: 1
REASON: torch.cuda.stream only changes the current stream (torch/cuda/__init__.py StreamContext); ordering between streams needs wait_stream / wait_event (CUDA programming guide, Streams).
"""
import torch


def main():
    torch.cuda.set_device(0)
    default = torch.cuda.current_stream()
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    x = torch.arange(1 << 16, dtype=torch.float32, device="cuda")
    s1.wait_stream(default)
    s2.wait_stream(default)
    with torch.cuda.stream(s1):
        y = torch.sin(x) * 3            # produced on s1
        with torch.cuda.stream(s2):
            z = y + 1                   # BUG: s2 never waited for s1
        s1.wait_stream(s2)
    default.wait_stream(s1)
    print(z.sum().item())


if __name__ == "__main__":
    main()
