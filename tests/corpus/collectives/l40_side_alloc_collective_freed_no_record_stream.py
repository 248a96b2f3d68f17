"""A buffer allocated on a side stream is all-reduced and read on the default stream, then freed without
record_stream; the side stream's next allocation reuses its block while the default stream may still use it.

EXPECTED: hazard
KINDS: reuse-after-free
KINDS_ALSO: write-after-read, write-after-write, read-after-write
MODELLED ON: communication buffers prepared on a copy/compute side stream and handed to the default stream
(gradient bucketing on a side stream), missing `buf.record_stream(torch.cuda.current_stream())`.
REASON: torch.Tensor.record_stream docs: the caching allocator "only tracks the stream the tensor was allocated on";
freeing the buffer returns its block to the side stream's pool, reusable at once by the side stream, with no
ordering against the default stream's pending reads and the collective's accesses on the default stream.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    N = 1 << 16
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        buf = torch.full((N,), float(rank + 1), device="cuda")
    torch.cuda.current_stream().wait_stream(side)
    dist.all_reduce(buf)
    out = buf * 2
    del buf                                        # BUG: no buf.record_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        scratch = torch.zeros(N, device="cuda")    # reuses buf's block on the side stream
    print(out.sum().item(), scratch.sum().item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
