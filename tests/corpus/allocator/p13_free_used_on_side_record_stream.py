"""As p12 but with x.record_stream(side) before del.

EXPECTED: clean
REASON: record_stream tells the caching allocator not to reuse the block until the side stream's queued work completes.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    side = torch.cuda.Stream()
    torch.manual_seed(0)
    x_cpu = torch.randn(1 << 16)
    x = x_cpu.to("cuda")
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        y = torch.sin(x) * 2
    x.record_stream(side)
    del x
    z = torch.zeros(1 << 16, device="cuda")
    torch.cuda.current_stream().wait_stream(side)
    assert torch.allclose(y.cpu(), torch.sin(x_cpu) * 2)
    assert z.abs().sum().item() == 0.0
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
