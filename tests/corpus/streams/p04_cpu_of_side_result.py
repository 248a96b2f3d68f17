"""Result computed on a side stream is copied to host with .cpu() on the default stream, no wait.

EXPECTED: hazard
KINDS: host-read
KIND_NOTE: the host reads (through a copy on the current stream) a result the side stream may not have finished: simdist labels this "host read before completion" (DESIGN.md 5); the copy kernel's view of it is a read-after-write.
REASON: .cpu() enqueues the D2H copy on the current stream and syncs only that stream; the side stream's matmul is unordered with it.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    x = torch.randn(128, 128, device="cuda")
    w = torch.randn(128, 128, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        y = x.matmul(w)
    host = y.cpu()                          # BUG: default stream never waited for side
    print(host.norm())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
