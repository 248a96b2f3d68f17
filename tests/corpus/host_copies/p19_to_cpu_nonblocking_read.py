"""tensor.to("cpu", non_blocking=True) then .tolist() on the result without synchronizing.

EXPECTED: hazard
KINDS: host-read
REASON: _to_copy with non_blocking=True from CUDA to CPU allocates a pinned output and returns before the copy completes (PyTorch non_blocking/pin_memory guide).
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    logits = torch.randn(8, 1000, device="cuda")
    preds = logits.argmax(dim=-1)
    preds_cpu = preds.to("cpu", non_blocking=True)
    print(preds_cpu.tolist())              # BUG: no torch.cuda.synchronize()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
