"""index_add_, scatter_ (and reduce="add"), masked_fill_, torch.where, nonzero, boolean indexing on cuda vs CPU;
the scatter target updated on a side stream joined by an event.

EXPECTED: clean
REASON: single stream plus one properly joined side stream; nonzero/boolean indexing synchronize the host.
"""
import os
import torch
import torch.distributed as dist


def f(x, idx, src, dev_side=None):
    out = torch.zeros(10, 4, device=x.device)
    out.index_add_(0, idx, src)
    s = torch.zeros(3, 5, device=x.device)
    s.scatter_(1, torch.tensor([[0, 1, 2, 3, 4], [4, 3, 2, 1, 0], [1, 1, 1, 1, 1]], device=x.device),
               torch.arange(15., device=x.device).view(3, 5), reduce="add")
    m = x.clone()
    m.masked_fill_(m < 0, 0.0)
    w = torch.where(x > 0.5, x, -x)
    nz = torch.nonzero(m > 1.0)
    sel = x[x > 0]
    return out, s, m, w, nz, sel


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    g = torch.Generator().manual_seed(0)
    x = torch.randn(6, 7, generator=g) * 2
    idx = torch.tensor([0, 3, 3, 9, 0])
    src = torch.randn(5, 4, generator=g)
    ref = f(x, idx, src)
    side = torch.cuda.Stream()
    xd = x.cuda()
    e = torch.cuda.Event()
    e.record()
    side.wait_event(e)
    with torch.cuda.stream(side):
        xd2 = xd * 1.0
        e2 = torch.cuda.Event()
        e2.record()
    torch.cuda.current_stream().wait_event(e2)
    xd2.record_stream(torch.cuda.current_stream())
    got = f(xd2, idx.cuda(), src.cuda())
    for r, gt in zip(ref, got):
        assert r.shape == gt.shape and torch.allclose(r.to(gt.dtype), gt.cpu(), atol=1e-6), (r, gt)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
