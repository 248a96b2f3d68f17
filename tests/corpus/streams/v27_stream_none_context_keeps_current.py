"""`with torch.cuda.stream(self.comm_stream):` where the stream is None when overlap is off (a pattern of
Megatron- and DeepSpeed-style code that keeps one code path): torch.cuda.stream(None) is a no-op, so inside an
outer side-stream context the work stays on the side stream and is ordered by the side stream's own waits.

EXPECTED: clean
WORLD_SIZE: 1
REASON: torch/cuda/__init__.py StreamContext.__enter__: `if cur_stream is None or self.idx == -1: return` (a None stream changes nothing); https://pytorch.org/docs/stable/generated/torch.cuda.stream.html.
"""
import torch


def main():
    torch.cuda.set_device(0)
    side = torch.cuda.Stream()
    comm_stream = None                                  # overlap disabled
    x = torch.arange(1 << 14, dtype=torch.float32, device="cuda")
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        with torch.cuda.stream(comm_stream):
            assert torch.cuda.current_stream() == side
            y = x * 2
        z = y + 1                                        # on side, after y in stream order
    assert torch.cuda.current_stream() == torch.cuda.default_stream()
    torch.cuda.current_stream().wait_stream(side)
    for t in (y, z):
        t.record_stream(torch.cuda.current_stream())
    n = 1 << 14
    assert z.sum().item() == 2 * (n - 1) * n / 2 + n


if __name__ == "__main__":
    main()
