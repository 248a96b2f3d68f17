"""torch.cat([a, b], out=buf) into a preallocated buffer: a from default, b from a side stream joined with
wait_stream; then torch.stack(out=) and values vs CPU.

EXPECTED: clean
REASON: the side stream producer is joined before the cat.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    ca, cb = torch.randn(100, 8), torch.randn(50, 8)
    a = ca.cuda()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        b = cb.cuda() * 2
    buf = torch.empty(150, 8, device="cuda")
    torch.cuda.current_stream().wait_stream(side)
    b.record_stream(torch.cuda.current_stream())
    torch.cat([a, b], dim=0, out=buf)
    st = torch.empty(2, 50, 8, device="cuda")
    torch.stack([a[:50], b], out=st)
    assert torch.equal(buf.cpu(), torch.cat([ca, cb * 2]))
    assert torch.equal(st.cpu(), torch.stack([ca[:50], cb * 2]))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
