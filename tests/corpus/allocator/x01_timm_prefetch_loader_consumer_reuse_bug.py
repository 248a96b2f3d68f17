"""timm's PrefetchLoader before huggingface/pytorch-image-models#2784: each batch is copied to the GPU and
normalized on a side stream, the consumer's stream waits for it, but the side stream never waits for the
consumer, so the block of a batch the consumer has dropped goes back to the side stream's pool and the next
batch's copy writes it while the consumer's kernels still read it.

EXPECTED: hazard
KINDS: reuse-after-free
KINDS_ALSO: write-after-read
WORLD_SIZE: 1
INCIDENT: https://github.com/huggingface/pytorch-image-models/pull/2784 (Sept 2026, "Fix #2781, CUDA stream
allocation"): "make the prefetch stream wait on the consumer stream before each batch so storage released by the
consumer is not overwritten while its queued reads are pending" (the fixed loader: x02).
MODELLED ON: timm/data/loader.py at 013851bf, `PrefetchLoader.__iter__`: a `torch.cuda.Stream(device=...)` made
per iteration of the loader (per epoch); per batch, under `torch.cuda.stream(stream)`: `next_input.to(device,
non_blocking=True)`, the same for the target, `next_input.to(img_dtype).sub_(mean).div_(std)`; then (from the
second batch on) `yield input, target`; then `torch.cuda.current_stream(device).wait_stream(stream)`; `input =
next_input`. `fast_collate` makes uint8 image batches, the DataLoader pins them (pin_memory=True); mean and std
are device tensors made on the default stream in `__init__`. No record_stream anywhere.
SIMPLIFIED: 3x8x8 images, batch 4, six batches, a linear classifier trained with SGD on the default stream, no
loss.item() in the loop (timm's distributed path logs only every log_interval steps).
RULE: a block freed by the caching allocator is reusable at once by later allocations on the stream it was
allocated on; use on another stream must be declared with Tensor.record_stream, or the allocating stream must
wait for the users (torch.Tensor.record_stream docs; https://pytorch.org/docs/stable/notes/cuda.html#cuda-memory-management).
WHAT SIMDIST SAYS: reuse-after-free, twice: a later batch's float input (`_to_copy` on the side stream) lands in
the block of a batch whose backward `mm` on the default stream is unordered with it, and a later target's H2D copy
in the block `nll_loss_backward` still reads.
"""
import torch
import torch.nn as nn

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


class Images(torch.utils.data.Dataset):
    def __init__(self, n):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randint(0, 256, (n, 3, 8, 8), dtype=torch.uint8, generator=g)
        self.y = torch.randint(0, 5, (n,), generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], int(self.y[i])


def collate(batch):  # timm's fast_collate for tensors: a uint8 batch and int64 targets
    images = torch.zeros((len(batch), *batch[0][0].shape), dtype=torch.uint8)
    for i, (img, _) in enumerate(batch):
        images[i].copy_(img)
    return images, torch.tensor([t for _, t in batch], dtype=torch.int64)


class PrefetchLoader:
    """timm 013851bf's loader, CUDA branch only."""

    def __init__(self, loader, device=torch.device("cuda")):
        self.loader, self.device = loader, device
        self.mean = torch.tensor([m * 255 for m in MEAN], device=device).view(1, 3, 1, 1)
        self.std = torch.tensor([s * 255 for s in STD], device=device).view(1, 3, 1, 1)

    def __iter__(self):
        stream = torch.cuda.Stream(device=self.device)
        first = True
        for next_input, next_target in self.loader:
            with torch.cuda.stream(stream):
                next_input = next_input.to(device=self.device, non_blocking=True)
                next_target = next_target.to(device=self.device, non_blocking=True)
                next_input = next_input.to(torch.float32).sub_(self.mean).div_(self.std)
            if not first:
                yield input, target  # noqa: F821 (bound on the previous batch)
            else:
                first = False
            torch.cuda.current_stream(device=self.device).wait_stream(stream)  # BUG: the stream never waits back
            input = next_input
            target = next_target
        yield input, target


def main():
    torch.cuda.set_device(0)
    torch.manual_seed(0)
    loader = torch.utils.data.DataLoader(Images(24), batch_size=4, collate_fn=collate, pin_memory=True)
    model = nn.Linear(3 * 8 * 8, 5).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for input, target in PrefetchLoader(loader):
        loss = nn.functional.cross_entropy(model(input.flatten(1)), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
    torch.cuda.synchronize()
    print("weight checksum", model.weight.sum().item())


if __name__ == "__main__":
    main()
