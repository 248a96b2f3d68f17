"""Loop: a temporary is allocated and written on a side stream, consumed on the default stream after wait_stream,
then dropped; the next iteration's side-stream allocation reuses its block while the default stream may still read.

EXPECTED: hazard
KINDS: reuse-after-free
KINDS_ALSO: write-after-read
REASON: the block is owned by the side stream and reused immediately by it after free; the default-stream use needs tmp.record_stream(default).
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    side = torch.cuda.Stream()
    acc = torch.zeros(1 << 16, device="cuda")
    base = torch.randn(1 << 16, device="cuda")
    side.wait_stream(torch.cuda.current_stream())
    for i in range(4):
        with torch.cuda.stream(side):
            tmp = base * (i + 1)
        torch.cuda.current_stream().wait_stream(side)
        acc.add_(tmp)                       # read on default
        del tmp                             # BUG: no tmp.record_stream(default)
    print(acc.sum().item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
