"""FSDP-style forward with prefetch: each layer's weight is sharded over the ranks; the all-gather of layer i+1
is issued on an all-gather stream (which first waits for the compute stream, so the gathered buffer is free)
while layer i computes; before using layer i's full weight the compute stream waits for the all-gather stream;
full weights are record_stream'ed for the compute stream. Output checked against an unsharded CPU forward.

EXPECTED: clean
REASON: torch/distributed/fsdp/_runtime_utils.py (_unshard on state._unshard_stream, then current_stream().wait_stream(unshard_stream) in _pre_forward_unshard / _wait_for_computation_stream); ProcessGroupNCCL runs a collective issued under a stream context after that stream's prior work.
"""
import os

import torch
import torch.distributed as dist

LAYERS, H = 4, 32


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    g = torch.Generator().manual_seed(0)
    full = [torch.randn(H, H, generator=g) / H ** 0.5 for _ in range(LAYERS)]
    shards = [w.flatten().chunk(world)[rank].cuda() for w in full]
    x0 = torch.randn(8, H, generator=g)
    compute = torch.cuda.current_stream()
    ag_stream = torch.cuda.Stream()

    def unshard(i):
        ag_stream.wait_stream(compute)
        with torch.cuda.stream(ag_stream):
            buf = torch.empty(H * H, device="cuda")
            dist.all_gather_into_tensor(buf, shards[i])
        return buf

    x = x0.cuda()
    pending = unshard(0)
    for i in range(LAYERS):
        compute.wait_stream(ag_stream)
        w = pending
        w.record_stream(compute)
        if i + 1 < LAYERS:
            pending = unshard(i + 1)          # prefetch overlaps layer i's compute
        x = torch.tanh(x @ w.view(H, H).T)
        del w
    ref = x0
    for w in full:
        ref = torch.tanh(ref @ w.T)
    assert torch.allclose(x.cpu(), ref, rtol=1e-4, atol=1e-5), (x.cpu() - ref).abs().max()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
