"""The bug twin of m36: the compute stream uses the prefetched full weight without waiting for the all-gather
stream (the missing `current_stream().wait_stream(unshard_stream)`), so layer i may read the buffer before its
all-gather has written it.

EXPECTED: hazard
KINDS: read-after-write
REASON: a collective issued under a side-stream context writes its output on the NCCL stream ordered after that side stream only; the compute stream must wait for it (torch/distributed/fsdp/_runtime_utils.py _wait_for_computation_stream / _pre_forward_unshard).
"""
import os

import torch
import torch.distributed as dist

LAYERS, H = 3, 32


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    g = torch.Generator().manual_seed(0)
    full = [torch.randn(H, H, generator=g) / H ** 0.5 for _ in range(LAYERS)]
    shards = [w.flatten().chunk(world)[rank].cuda() for w in full]
    compute = torch.cuda.current_stream()
    ag_stream = torch.cuda.Stream()

    def unshard(i):
        ag_stream.wait_stream(compute)
        with torch.cuda.stream(ag_stream):
            buf = torch.empty(H * H, device="cuda")
            dist.all_gather_into_tensor(buf, shards[i])
        return buf

    x = torch.randn(8, H, generator=g).cuda()
    pending = unshard(0)
    for i in range(LAYERS):
        w = pending                             # BUG: no compute.wait_stream(ag_stream)
        w.record_stream(compute)
        if i + 1 < LAYERS:
            pending = unshard(i + 1)
        x = torch.tanh(x @ w.view(H, H).T)
    print(x.sum().item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
