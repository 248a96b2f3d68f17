"""The fix of l40: buf.record_stream(torch.cuda.current_stream()) before it is freed; the side stream's next
allocation does not reuse the block until the default stream's work on it has finished; values checked.

EXPECTED: clean
WORLD_SIZE: 2
MODELLED ON: the record_stream fix for buffers handed across streams (torch.Tensor.record_stream).
REASON: torch.Tensor.record_stream docs: "Ensures that the tensor memory is not reused for another tensor until all
work queued on stream at the time record_stream is called has been completed".
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    N = 1 << 16
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        buf = torch.full((N,), float(rank + 1), device="cuda")
    torch.cuda.current_stream().wait_stream(side)
    dist.all_reduce(buf)
    out = buf * 2
    buf.record_stream(torch.cuda.current_stream())
    del buf
    with torch.cuda.stream(side):
        scratch = torch.zeros(N, device="cuda")
    torch.cuda.synchronize()
    s = float(sum(range(1, world + 1)))
    assert torch.all(out.cpu() == 2 * s).item() and scratch.sum().item() == 0.0
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
