"""side.synchronize() before the default stream consumes the side stream's output.

EXPECTED: clean
REASON: Stream.synchronize() blocks the host until that stream's queued work is done; later launches are ordered after it.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    base = torch.arange(16, dtype=torch.float32, device="cuda").reshape(4, 4)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        t = base.t().contiguous()
        t.mul_(2)
    side.synchronize()
    out = (t + base).tolist()
    ref = (torch.arange(16.).reshape(4, 4).t() * 2 + torch.arange(16.).reshape(4, 4)).tolist()
    assert out == ref, out
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
