"""x is read on a side stream through a view v = x[1024:2048]; `del x` (v keeps the storage alive: no free), then new
default-stream allocations of the same size are written; v is finally consumed after a join. Values vs CPU.

EXPECTED: clean
REASON: a view holds the storage; deleting the base frees nothing, so nothing can reuse the block.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    a = torch.randn(1 << 14)
    x = a.cuda()
    v = x[1024:2048]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        r = v * 3
    before = torch.cuda.memory_allocated()
    del x
    assert torch.cuda.memory_allocated() == before          # nothing freed
    junk = [torch.full((1 << 14,), 7.0, device="cuda") for _ in range(3)]
    torch.cuda.current_stream().wait_stream(side)
    r.record_stream(torch.cuda.current_stream())
    assert torch.allclose(r.cpu(), a[1024:2048] * 3)
    assert torch.equal(v.cpu(), a[1024:2048])
    assert all(j.sum().item() == 7.0 * (1 << 14) for j in junk)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
