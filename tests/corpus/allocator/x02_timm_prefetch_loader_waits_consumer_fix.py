"""timm's PrefetchLoader as huggingface/pytorch-image-models#2784 fixed it (x01 is the loader before): the side
stream is made once per loader, and before each batch it waits for the consumer's stream, so a block the consumer
dropped is rewritten only after the consumer's queued reads of it. Two epochs of SGD give the parameters of the
same loop on the CPU.

EXPECTED: clean
WORLD_SIZE: 1
INCIDENT: https://github.com/huggingface/pytorch-image-models/pull/2784 ("Create the prefetch stream once per loader
instead of once per epoch ... Also make the prefetch stream wait on the consumer stream before each batch so
storage released by the consumer is not overwritten while its queued reads are pending"); issue #2781 (reserved
memory growing epoch after epoch).
MODELLED ON: timm/data/loader.py at 013851bf `PrefetchLoader` (see x01) with the two changes #2784 describes:
`self.stream` made in `__init__`, and `stream.wait_stream(torch.cuda.current_stream(device))` before the copies of
each batch.
RULE: the caching allocator reuses a freed block at once for later allocations on the stream it came from; once
that stream has waited for the consumer's stream (cudaStreamWaitEvent on an event recorded after the consumer's
reads were queued), the reuse is ordered after those reads (https://pytorch.org/docs/stable/notes/cuda.html#cuda-streams;
torch/cuda/streams.py Stream.wait_stream).
"""
import copy

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


def collate(batch):  # timm's fast_collate for tensors
    images = torch.zeros((len(batch), *batch[0][0].shape), dtype=torch.uint8)
    for i, (img, _) in enumerate(batch):
        images[i].copy_(img)
    return images, torch.tensor([t for _, t in batch], dtype=torch.int64)


class PrefetchLoader:
    def __init__(self, loader, device=torch.device("cuda")):
        self.loader, self.device = loader, device
        self.mean = torch.tensor([m * 255 for m in MEAN], device=device).view(1, 3, 1, 1)
        self.std = torch.tensor([s * 255 for s in STD], device=device).view(1, 3, 1, 1)
        self.stream = torch.cuda.Stream(device=device)  # once per loader

    def __iter__(self):
        stream = self.stream
        first = True
        for next_input, next_target in self.loader:
            stream.wait_stream(torch.cuda.current_stream(device=self.device))  # the fix: wait for the consumer
            with torch.cuda.stream(stream):
                next_input = next_input.to(device=self.device, non_blocking=True)
                next_target = next_target.to(device=self.device, non_blocking=True)
                next_input = next_input.to(torch.float32).sub_(self.mean).div_(self.std)
            if not first:
                yield input, target  # noqa: F821
            else:
                first = False
            torch.cuda.current_stream(device=self.device).wait_stream(stream)
            input = next_input
            target = next_target
        if not first:
            yield input, target


def main():
    torch.cuda.set_device(0)
    torch.manual_seed(0)
    data = Images(24)
    loader = torch.utils.data.DataLoader(data, batch_size=4, collate_fn=collate, pin_memory=True)
    ref = nn.Linear(3 * 8 * 8, 5)
    model = copy.deepcopy(ref).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    opt_ref = torch.optim.SGD(ref.parameters(), lr=0.1)
    prefetcher = PrefetchLoader(loader)
    mean = torch.tensor([m * 255 for m in MEAN]).view(1, 3, 1, 1)
    std = torch.tensor([s * 255 for s in STD]).view(1, 3, 1, 1)
    for epoch in range(2):
        n = 0
        for (input, target), (x, y) in zip(prefetcher, loader):
            loss = nn.functional.cross_entropy(model(input.flatten(1)), target)
            opt.zero_grad()
            loss.backward()
            opt.step()
            loss_ref = nn.functional.cross_entropy(ref(((x.float() - mean) / std).flatten(1)), y)
            opt_ref.zero_grad()
            loss_ref.backward()
            opt_ref.step()
            n += 1
        assert n == 6, n
    for p, q in zip(ref.parameters(), model.parameters()):
        assert torch.allclose(p, q.detach().cpu(), rtol=1e-5, atol=1e-6), (p - q.detach().cpu()).abs().max()
    print("parameters match the CPU loop")


if __name__ == "__main__":
    main()
