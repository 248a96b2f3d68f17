"""record_stream called on a *view* (v.record_stream(side)) protects the whole storage: after del of base and
view, a new default-stream allocation may not reuse the block before the side stream's work; values vs CPU.

EXPECTED: clean
REASON: Tensor.record_stream marks the tensor's storage (data_ptr's block) as in use by the stream.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    a = torch.randn(1 << 16)
    x = a.cuda()
    v = x[100:200]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        r = x.sum() + v.sum()
    v.record_stream(side)
    del x, v
    y = torch.zeros(1 << 16, device="cuda")
    torch.cuda.current_stream().wait_stream(side)
    r.record_stream(torch.cuda.current_stream())
    assert abs(r.item() - (a.sum() + a[100:200].sum()).item()) < 1e-2
    assert y.sum().item() == 0
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
