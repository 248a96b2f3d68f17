"""Even elements (as_strided stride 2) written in place on stream A while odd elements (x[1::2]) are read on stream B.
Byte ranges of the two views interleave but never overlap.

EXPECTED: clean
REASON: no byte is accessed by both streams; element-granular accesses of 4-byte floats do not conflict on a GPU.
"""
import os
import torch
import torch.distributed as dist

N = 1 << 12


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    a = torch.randn(N)
    x = a.cuda()
    sa, sb = torch.cuda.Stream(), torch.cuda.Stream()
    sa.wait_stream(torch.cuda.current_stream())
    sb.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(sa):
        ev = x.as_strided((N // 2,), (2,), 0)
        ev.mul_(3)
    with torch.cuda.stream(sb):
        od = x[1::2] * 5
    cur = torch.cuda.current_stream()
    cur.wait_stream(sa)
    cur.wait_stream(sb)
    exp = a.clone()
    exp[0::2] *= 3
    assert torch.allclose(x.cpu(), exp)
    assert torch.allclose(od.cpu(), a[1::2] * 5)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
