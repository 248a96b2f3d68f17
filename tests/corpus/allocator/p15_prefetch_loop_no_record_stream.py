"""Prefetch loop: batches copied H2D on a side stream into side-allocated tensors, consumed on the default stream, reassigned each step.

EXPECTED: hazard
KINDS: reuse-after-free
REASON: the batch is allocated on the side stream and used on the default stream; when it is freed (reassignment) the side stream may reuse its block before the default stream's read finished; record_stream(current) is required (torch.Tensor.record_stream docs).
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    torch.manual_seed(0)
    host = [torch.randn(256, 256).pin_memory() for _ in range(6)]
    w = torch.randn(256, 256, device="cuda")
    copy_stream = torch.cuda.Stream()
    acc = torch.zeros(256, 256, device="cuda")
    with torch.cuda.stream(copy_stream):
        nxt = host[0].to("cuda", non_blocking=True)
    for i in range(6):
        torch.cuda.current_stream().wait_stream(copy_stream)
        batch = nxt
        if i + 1 < 6:
            with torch.cuda.stream(copy_stream):
                nxt = host[i + 1].to("cuda", non_blocking=True)
        acc += batch @ w                         # BUG: no batch.record_stream(current_stream())
        del batch
    torch.cuda.synchronize()
    print(acc.abs().sum().item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
