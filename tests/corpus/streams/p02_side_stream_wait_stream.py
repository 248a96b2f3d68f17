"""Compute on a side stream with wait_stream in both directions.

EXPECTED: clean
REASON: CUDA semantics: wait_stream orders later work on the waiting stream after all work queued on the other.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    torch.manual_seed(1)
    a_cpu = torch.randn(64, 64)
    b_cpu = torch.randn(64, 64)
    a = a_cpu.cuda()
    b = b_cpu.cuda()
    a = a * 2.0 + 1.0                      # produced on the default stream
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        c = torch.mm(a, b)
        c = torch.relu(c)
    torch.cuda.current_stream().wait_stream(side)
    ref = torch.relu(torch.mm(a_cpu * 2.0 + 1.0, b_cpu))
    assert torch.allclose(c.cpu(), ref, rtol=1e-4, atol=1e-4)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
