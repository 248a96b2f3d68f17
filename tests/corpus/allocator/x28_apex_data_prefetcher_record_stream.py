"""NVIDIA apex's ImageNet example's `data_prefetcher` (copied into many detection and re-ID code bases): the next
batch is copied to the GPU on a side stream with `.cuda(non_blocking=True)` from the DataLoader's pinned batch and
normalized there (`.float()`, `sub_(mean).div_(std)`, mean and std device tensors made on the default stream in
`__init__`); `next()` makes the current stream wait for the side stream, calls `record_stream(current_stream())`
on the batch (allocated on the side stream, used and freed on the default stream), and starts the next preload
before returning. A few SGD steps give the same parameters as on the CPU.

EXPECTED: clean
WORLD_SIZE: 1
MODELLED ON: NVIDIA/apex examples/imagenet/main_amp.py `data_prefetcher` (`__init__`: `torch.cuda.Stream()`,
`torch.tensor([0.485 * 255, ...]).cuda().view(1,3,1,1)`, `preload()`; `preload`: `next(self.loader)`, under
`torch.cuda.stream(self.stream)`: `.cuda(non_blocking=True)` of input and target, `self.next_input.float()`,
`.sub_(self.mean).div_(self.std)`, the commented-out alternative that x29 spells out; `next`:
`torch.cuda.current_stream().wait_stream(self.stream)`, `input.record_stream(torch.cuda.current_stream())`, the same
for the target, `self.preload()`), and its `train` loop (`input, target = prefetcher.next()` / `while input is
not None:` ... `input, target = prefetcher.next()` at the end of the body).
SIMPLIFIED: 3x8x8 uint8 images, batch 4, six batches, DataLoader(pin_memory=True, num_workers=0), a linear
classifier, cross entropy, SGD, no loss.item() in the loop.
RULE: wait_stream orders the consumer after the side stream's copies; record_stream keeps a block allocated on the
side stream from reuse there until the consumer's queued work is done (torch.Tensor.record_stream docs;
https://pytorch.org/docs/stable/notes/cuda.html#cuda-memory-management).
"""
import os

import torch
import torch.nn as nn

DELAY = int(os.environ.get("X_DELAY_CYCLES", "0"))  # a GPU check's torch.cuda._sleep in each training step
ASSERT_CLEAN = True
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


class Images(torch.utils.data.Dataset):
    def __init__(self, n):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randint(0, 256, (n, 3, 8, 8), dtype=torch.uint8, generator=g)
        self.y = torch.randint(0, 5, (n,), generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


class data_prefetcher:
    def __init__(self, loader):
        self.loader = iter(loader)
        self.stream = torch.cuda.Stream()
        self.mean = torch.tensor([m * 255 for m in MEAN]).cuda().view(1, 3, 1, 1)
        self.std = torch.tensor([s * 255 for s in STD]).cuda().view(1, 3, 1, 1)
        self.preload()

    def preload(self):
        try:
            self.next_input, self.next_target = next(self.loader)
        except StopIteration:
            self.next_input = None
            self.next_target = None
            return
        with torch.cuda.stream(self.stream):
            self.next_input = self.next_input.cuda(non_blocking=True)
            self.next_target = self.next_target.cuda(non_blocking=True)
            self.next_input = self.next_input.float()
            self.next_input = self.next_input.sub_(self.mean).div_(self.std)

    def next(self):
        torch.cuda.current_stream().wait_stream(self.stream)
        input, target = self.next_input, self.next_target
        if input is not None:
            input.record_stream(torch.cuda.current_stream())
        if target is not None:
            target.record_stream(torch.cuda.current_stream())
        self.preload()
        return input, target


def make_model():
    torch.manual_seed(0)
    return nn.Linear(3 * 8 * 8, 5)


def train_step(model, opt, x, y):
    nn.functional.cross_entropy(model(x.flatten(1)), y).backward()
    opt.step()
    opt.zero_grad()


def main():
    torch.cuda.set_device(0)
    data = Images(24)
    mean = torch.tensor([m * 255 for m in MEAN]).view(1, 3, 1, 1)
    std = torch.tensor([s * 255 for s in STD]).view(1, 3, 1, 1)
    ref = make_model()
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for x, y in torch.utils.data.DataLoader(data, batch_size=4):
        train_step(ref, ref_opt, x.float().sub_(mean).div_(std), y)
    model = make_model().cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    prefetcher = data_prefetcher(torch.utils.data.DataLoader(data, batch_size=4, pin_memory=True))
    input, target = prefetcher.next()
    while input is not None:
        if DELAY:
            torch.cuda._sleep(DELAY)  # the consumer's kernels run late: its reads of this batch stay queued
        train_step(model, opt, input, target)
        input, target = prefetcher.next()
    worst = max(((p.detach().cpu() - r).abs().max() / r.abs().max()).item()
                for p, r in zip(model.parameters(), ref.parameters()))
    worst = worst if worst == worst else float("inf")
    print(f"largest relative parameter difference from the CPU reference: {worst:.3g}")
    ASSERT_CLEAN and assert_small(worst)


def assert_small(worst):
    assert worst < 1e-4, worst


if __name__ == "__main__":
    main()
