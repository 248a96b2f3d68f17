"""One buffer; after both side streams wait on default, stream A writes buf[:N//2] in place while stream B reads
buf[N//2:]; then default joins both and checks values.

EXPECTED: clean
REASON: the two streams touch disjoint bytes of the same allocation: no race.
"""
import os
import torch
import torch.distributed as dist

N = 1 << 14


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    a = torch.arange(N, dtype=torch.float32)
    buf = a.cuda()
    sa, sb = torch.cuda.Stream(), torch.cuda.Stream()
    sa.wait_stream(torch.cuda.current_stream())
    sb.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(sa):
        buf[: N // 2].mul_(-1)
        buf.narrow(0, 0, N // 4).add_(1)
    with torch.cuda.stream(sb):
        s = buf[N // 2:].sum()
        t = buf[N // 2:].view(-1, 2).select(1, 0).clone()
    cur = torch.cuda.current_stream()
    cur.wait_stream(sa)
    cur.wait_stream(sb)
    exp = a.clone()
    exp[: N // 2] *= -1
    exp[: N // 4] += 1
    assert torch.equal(buf.cpu(), exp)
    assert s.item() == a[N // 2:].sum().item()
    assert torch.equal(t.cpu(), a[N // 2::2])
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
