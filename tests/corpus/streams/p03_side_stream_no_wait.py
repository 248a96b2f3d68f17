"""Side stream reads a tensor produced on the default stream without waiting.

EXPECTED: hazard
KINDS: read-after-write
REASON: CUDA semantics: work on different streams is unordered unless synchronized (wait_stream/wait_event).
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    x = torch.randn(256, 256, device="cuda")
    x = torch.tanh(x) * 3.0                # default stream writes x
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        y = x.sum(dim=0)                   # BUG: no side.wait_stream(current)
    torch.cuda.current_stream().wait_stream(side)
    print(y[:4].cpu())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
