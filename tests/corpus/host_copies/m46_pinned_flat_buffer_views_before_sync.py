"""One flat pinned buffer receives a non_blocking D2H copy of a flattened parameter bucket (DeepSpeed's and
torchtitan's CPU offload flatten their shards so), the host splits it into per-parameter views right away
(views read no bytes), synchronizes, then reads each view: the values are the device's.

EXPECTED: clean
WORLD_SIZE: 1
REASON: a view shares its base's storage and reads nothing (https://pytorch.org/docs/stable/tensor_view.html); the reads come after torch.cuda.synchronize(), which waits for the copy.
"""
import torch


def main():
    torch.cuda.set_device(0)
    shapes = [(64, 32), (64,), (16, 64), (16,)]
    g = torch.Generator().manual_seed(0)
    params = [torch.randn(s, generator=g) for s in shapes]
    bucket = torch.cat([p.flatten() for p in params]).cuda() * 2
    flat = torch.empty(bucket.numel(), pin_memory=True)
    flat.copy_(bucket, non_blocking=True)
    views, off = [], 0
    for s in shapes:
        n = torch.Size(s).numel()
        views.append(flat[off:off + n].view(s))
        off += n
    torch.cuda.synchronize()
    for v, p in zip(views, params):
        assert torch.equal(v, p * 2)


if __name__ == "__main__":
    main()
