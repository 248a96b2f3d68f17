"""As p15 but the consumer calls batch.record_stream(torch.cuda.current_stream()).

EXPECTED: clean
REASON: record_stream defers reuse of the side-allocated block until the default stream's queued reads complete.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    torch.manual_seed(0)
    host = [torch.randn(256, 256).pin_memory() for _ in range(6)]
    w_cpu = torch.randn(256, 256)
    w = w_cpu.cuda()
    copy_stream = torch.cuda.Stream()
    acc = torch.zeros(256, 256, device="cuda")
    with torch.cuda.stream(copy_stream):
        nxt = host[0].to("cuda", non_blocking=True)
    for i in range(6):
        torch.cuda.current_stream().wait_stream(copy_stream)
        batch = nxt
        batch.record_stream(torch.cuda.current_stream())
        if i + 1 < 6:
            with torch.cuda.stream(copy_stream):
                nxt = host[i + 1].to("cuda", non_blocking=True)
        acc += batch @ w
        del batch
    ref = sum(h @ w_cpu for h in host)
    assert torch.allclose(acc.cpu(), ref, rtol=1e-4, atol=1e-3)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
