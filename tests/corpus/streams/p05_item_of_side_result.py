"""A scalar reduced on a side stream is read with .item() without syncing the side stream.

EXPECTED: hazard
KINDS: host-read
KIND_NOTE: the host reads (through a copy on the current stream) a result the side stream may not have finished: simdist labels this "host read before completion" (DESIGN.md 5); the copy kernel's view of it is a read-after-write.
REASON: .item() copies on the current stream and synchronizes only it; the side stream's reduction is unordered.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    x = torch.rand(4096, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        total = (x * x).sum()
    val = total.item()                     # BUG
    print("total", val)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
