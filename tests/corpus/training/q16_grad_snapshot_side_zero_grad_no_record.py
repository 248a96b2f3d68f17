"""A side stream snapshots the grads (copy into a stash) after waiting on default; then zero_grad(set_to_none=True)
frees the grads on the default stream and the next backward allocates new grads there, no record_stream.

EXPECTED: hazard
KINDS: reuse-after-free
KINDS_ALSO: write-after-read
REASON: caching allocator: freed grad blocks are reused immediately by their owning (default) stream; the side stream may still read them (needs record_stream).
"""
import os
import torch
import torch.nn as nn
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    torch.manual_seed(0)
    model = nn.Linear(256, 256, bias=False).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        stash = torch.zeros(256, 256, device="cuda")
    for step in range(3):
        x = torch.randn(64, 256, device="cuda")
        model(x).square().mean().backward()
        opt.step()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            stash.add_(model.weight.grad)            # read of the grad on the side stream
        opt.zero_grad(set_to_none=True)              # BUG: grad freed without record_stream(side)
    torch.cuda.current_stream().wait_stream(side)
    print(stash.sum().item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
