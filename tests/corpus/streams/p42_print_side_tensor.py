"""print() a tensor produced on a side stream without the default stream waiting.

EXPECTED: hazard
KINDS: host-read
KIND_NOTE: the host reads (through a copy on the current stream) a result the side stream may not have finished: simdist labels this "host read before completion" (DESIGN.md 5); the copy kernel's view of it is a read-after-write.
REASON: printing a CUDA tensor copies it to the host on the current stream, which is unordered with the side stream's write.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    x = torch.randn(6, 6, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        y = torch.sigmoid(x @ x.T)
    print(y)                               # BUG: no wait
    torch.cuda.synchronize()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
