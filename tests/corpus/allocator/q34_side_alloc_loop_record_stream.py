"""q33 with tmp.record_stream(torch.cuda.current_stream()) before the drop (also reassigning via `tmp = None`);
values vs CPU.

EXPECTED: clean
REASON: record_stream defers the block's reuse until the default stream's queued work is done.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    side = torch.cuda.Stream()
    cb = torch.randn(1 << 16)
    acc = torch.zeros(1 << 16, device="cuda")
    base = cb.cuda()
    side.wait_stream(torch.cuda.current_stream())
    for i in range(4):
        with torch.cuda.stream(side):
            tmp = base * (i + 1)
        torch.cuda.current_stream().wait_stream(side)
        acc.add_(tmp)
        tmp.record_stream(torch.cuda.current_stream())
        tmp = None
    assert torch.allclose(acc.cpu(), cb * 10, atol=1e-5)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
