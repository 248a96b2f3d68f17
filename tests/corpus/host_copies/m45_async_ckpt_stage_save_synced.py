"""The fixed m44: the staging copies are followed by an event whose synchronize() the saver waits for before
torch.save; torch.load of the bytes gives the device state dict exactly.

EXPECTED: clean
WORLD_SIZE: 1
REASON: torch.cuda.Event.synchronize waits for the copies recorded before it (torch/cuda/streams.py); afterwards the pinned buffers hold the values torch.save writes.
"""
import io

import torch
import torch.nn as nn


def main():
    torch.cuda.set_device(0)
    model = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 64)).cuda()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1.5)
    staged = {}
    for name, t in model.state_dict().items():
        buf = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
        buf.copy_(t, non_blocking=True)
        staged[name] = buf
    done = torch.cuda.Event()
    done.record()
    done.synchronize()
    f = io.BytesIO()
    torch.save(staged, f)
    f.seek(0)
    loaded = torch.load(f)
    for name, t in model.state_dict().items():
        assert torch.equal(loaded[name], t.cpu()), name


if __name__ == "__main__":
    main()
