"""broadcast of randomly initialised weights from rank 1, then list all_gather; check all ranks agree.

EXPECTED: clean
REASON: synchronous collectives in sequence on the default stream; .cpu() syncs.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    world = dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    torch.manual_seed(100 + rank)          # different on each rank
    w = torch.randn(33, 17, device="cuda")
    dist.broadcast(w, src=1)
    parts = [torch.empty_like(w) for _ in range(world)]
    dist.all_gather(parts, w)
    host = [p.cpu() for p in parts]
    for p in host[1:]:
        assert torch.equal(p, host[0])
    torch.manual_seed(101)
    assert torch.equal(host[0], torch.randn(33, 17, device="cuda").cpu())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
