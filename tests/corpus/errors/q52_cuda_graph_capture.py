"""torch.cuda.CUDAGraph capture on a side stream (the documented recipe), then replay after changing the static
input: either refused with UnsupportedOperation or the replayed output equals the CPU reference.

EXPECTED: clean-or-error
ERROR: UnsupportedOperation
REASON: https://pytorch.org/docs/stable/notes/cuda.html#cuda-graphs: replay re-runs the captured kernels on the static tensors.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    static_in = torch.randn(64, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            static_out = static_in * 2 + 1     # warmup
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        static_out = static_in * 2 + 1
    new = torch.arange(64, dtype=torch.float32)
    static_in.copy_(new.cuda())
    g.replay()
    assert torch.equal(static_out.cpu(), new * 2 + 1), static_out.cpu()[:4]
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
