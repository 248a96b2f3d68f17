"""The alternative that apex's `data_prefetcher` leaves in comments "if record_stream() doesn't work": the device
batch buffers are made on the main stream (`torch.empty_like(next_input, device='cuda')`) and filled by
`copy_(non_blocking=True)` on the side stream, with no record_stream; the line the comments say it needs,
`self.stream.wait_stream(torch.cuda.current_stream())`, is commented out in apex too, and is left out here. A
buffer the training loop has dropped goes back to the main stream's pool at once; the next preload's
`empty_like` on the main stream takes that block, and the side stream's copy writes it while the main stream's
queued kernels of the earlier step may still read it.

EXPECTED: hazard
KINDS: reuse-after-free
WORLD_SIZE: 1
MODELLED ON: NVIDIA/apex examples/imagenet/main_amp.py `data_prefetcher.preload`, its commented-out alternative
(`# self.next_input_gpu = torch.empty_like(self.next_input, device='cuda')`, `# self.stream.wait_stream(
torch.cuda.current_stream())`, `# self.next_input_gpu.copy_(self.next_input, non_blocking=True)`, `# self.next_input
= self.next_input_gpu`) enabled except the wait_stream line, and `next` without the record_stream calls that the
alternative replaces; the rest as x28. Images are float here (the DataLoader returns them float), so the
normalization allocates nothing on the side stream; the targets are float (MSE), so that damaged bytes
cannot make an out-of-range class index (a device-side assert).
FIXED (notes x24): simdist missed this race; its detector dropped the block's own-stream accesses at the free,
on the premise that the next owner's first access is on that stream; here it is the side stream's copy. The
block now keeps its stream's last accesses (simdist/engine/prior.py).
RULE: a block freed by the caching allocator is reused at once by the next allocation on its stream; a kernel on
another stream writing the new tensor is unordered with the old tensor's queued readers unless that stream
waits for them (https://pytorch.org/docs/stable/notes/cuda.html#cuda-memory-management).
WHAT SIMDIST SHOULD SAY: reuse-after-free: the side stream's copy_h2d_async into a new batch buffer is unordered with
the main stream's last accesses (mm, the loss) of the earlier batch that held the same block.
"""
import os

import torch
import torch.nn as nn

DELAY = int(os.environ.get("X_DELAY_CYCLES", "0"))  # a GPU check's torch.cuda._sleep in each training step
ASSERT_CLEAN = False
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


class Images(torch.utils.data.Dataset):
    def __init__(self, n):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randint(0, 256, (n, 3, 8, 8), dtype=torch.uint8, generator=g)
        self.y = torch.randn(n, 5, generator=g)  # regression targets: damaged bytes cannot index out of range

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i].float(), self.y[i]  # float images, so the alternative needs no side-stream .float()


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
        # the alternative "if record_stream() doesn't work": device inputs made on the main stream
        self.next_input_gpu = torch.empty_like(self.next_input, device="cuda")
        self.next_target_gpu = torch.empty_like(self.next_target, device="cuda")
        # BUG: left commented out, as in apex: "Need to make sure the memory allocated for next_* is not still in
        # use by the main stream at the time we start copying to next_*:"
        # self.stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.stream):
            self.next_input_gpu.copy_(self.next_input, non_blocking=True)
            self.next_target_gpu.copy_(self.next_target, non_blocking=True)
            self.next_input = self.next_input_gpu
            self.next_target = self.next_target_gpu
            self.next_input = self.next_input.sub_(self.mean).div_(self.std)  # float images: .float() is a no-op

    def next(self):
        torch.cuda.current_stream().wait_stream(self.stream)
        input, target = self.next_input, self.next_target  # made on the main stream: no record_stream
        self.preload()
        return input, target


def make_model():
    torch.manual_seed(0)
    return nn.Linear(3 * 8 * 8, 5)


def train_step(model, opt, x, y):
    nn.functional.mse_loss(model(x.flatten(1)), y).backward()
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
