"""A default-owned tensor used on a side stream, record_stream(side), freed, torch.cuda.empty_cache(), then new
allocations; memory_allocated goes back; values checked.

EXPECTED: clean
REASON: empty_cache cannot release a block with pending stream uses (its events are processed / synchronized first); record_stream protects reuse.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    a = torch.randn(1 << 18)
    base_alloc = torch.cuda.memory_allocated()
    x = a.cuda()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        r = x * 2
    x.record_stream(side)
    del x
    torch.cuda.empty_cache()
    ys = [torch.ones(1 << 18, device="cuda") for _ in range(2)]
    torch.cuda.current_stream().wait_stream(side)
    r.record_stream(torch.cuda.current_stream())
    assert torch.equal(r.cpu(), a * 2)
    assert all(y.sum().item() == float(1 << 18) for y in ys)
    del r, ys
    assert torch.cuda.memory_allocated() == base_alloc, (torch.cuda.memory_allocated(), base_alloc)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
