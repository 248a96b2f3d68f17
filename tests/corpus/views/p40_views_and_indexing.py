"""Views, transpose/contiguous, permute, index_select, setitem, boolean masks, cat/stack/chunk, scatter_add; compare to CPU.

EXPECTED: clean
REASON: single stream; every host read is a synchronizing copy on the producing stream.
"""
import os
import torch
import torch.distributed as dist


def ops(x, idx):
    y = x.t().contiguous()
    y[1:3, :] = 0.5
    z = y.view(-1)[::3].clone()
    p = x.reshape(2, 3, 4).permute(2, 0, 1).contiguous()
    sel = torch.index_select(x, 0, idx)
    x2 = x.clone()
    x2[idx] = -1.0
    masked = x2.masked_fill(x2 < 0, 9.0)
    big = x[x > 5.0]
    cat = torch.cat([x, x2], dim=1)
    st = torch.stack(list(torch.chunk(x, 2, dim=1)), dim=0)
    sc = torch.zeros(3, device=x.device).scatter_add_(0, torch.tensor([0, 1, 2, 0], device=x.device),
                                                     x[0, :4])
    cs = torch.cumsum(x.flatten(), 0)
    srt, order = torch.sort(x[1], descending=True)
    return [y, z, p, sel, masked, big, cat, st, sc, cs, srt, order, x.unsqueeze(0).expand(2, -1, -1).sum(0)]


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    xc = torch.arange(24, dtype=torch.float32).reshape(6, 4) * 0.5
    ic = torch.tensor([4, 0, 2])
    ref = ops(xc, ic)
    got = ops(xc.cuda(), ic.cuda())
    for i, (a, b) in enumerate(zip(got, ref)):
        assert a.is_cuda, i
        assert a.shape == b.shape, (i, a.shape, b.shape)
        assert torch.equal(a.cpu(), b), (i, a.cpu(), b)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
