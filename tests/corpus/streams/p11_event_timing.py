"""Time a few matmuls with timing events; synchronize on the end event; check the result.

EXPECTED: clean
REASON: events recorded on the same stream as the work; end.synchronize() before elapsed_time and before reading.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    a = torch.eye(32, device="cuda") * 2
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    x = torch.eye(32, device="cuda")
    for _ in range(5):
        x = x @ a
    end.record()
    end.synchronize()
    ms = start.elapsed_time(end)
    assert ms >= 0.0, ms
    assert torch.equal(x.cpu(), torch.eye(32) * 32)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
