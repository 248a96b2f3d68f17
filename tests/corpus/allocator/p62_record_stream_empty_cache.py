"""record_stream on a tensor used by a side stream, del, torch.cuda.empty_cache(), new allocation and write on default.

EXPECTED: clean
REASON: the caching allocator keeps a block with pending record_stream uses out of circulation (empty_cache does not release it); later reuse is safe.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    side = torch.cuda.Stream()
    x = torch.full((1 << 18,), 3.0, device="cuda")
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        y = (x * x).sum()
    x.record_stream(side)
    del x
    torch.cuda.empty_cache()
    z = torch.full((1 << 18,), -1.0, device="cuda")
    torch.cuda.current_stream().wait_stream(side)
    assert y.item() == 9.0 * (1 << 18), y.item()
    assert z.sum().item() == -float(1 << 18)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
