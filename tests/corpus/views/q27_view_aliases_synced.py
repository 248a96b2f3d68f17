"""In-place ops through .t(), .view(), .as_strided(), .unsqueeze().expand() reads, across two streams, all properly
synchronized with events; values vs CPU.

EXPECTED: clean
REASON: each cross-stream use is ordered by an event wait.
"""
import os
import torch
import torch.distributed as dist


def ops(w):
    w.t()[0].add_(1)                                 # column 0
    w.view(4, 2, 8)[:, 1, :].mul_(2)                 # second half of each row
    d = w.as_strided((4,), (w.shape[1] + 1,), 0)     # diagonal
    d.fill_(-1)
    return w.sum(0, keepdim=True).expand(3, -1) + w[:3]


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    a = torch.randn(4, 16)
    ref = ops(a.clone())
    w = a.cuda()
    side = torch.cuda.Stream()
    e1, e2 = torch.cuda.Event(), torch.cuda.Event()
    e1.record()
    side.wait_event(e1)
    with torch.cuda.stream(side):
        w.t()[0].add_(1)
        w.view(4, 2, 8)[:, 1, :].mul_(2)
        e2.record()
    torch.cuda.current_stream().wait_event(e2)
    w.as_strided((4,), (17,), 0).fill_(-1)
    out = w.sum(0, keepdim=True).expand(3, -1) + w[:3]
    assert torch.allclose(out.cpu(), ref, atol=1e-6)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
