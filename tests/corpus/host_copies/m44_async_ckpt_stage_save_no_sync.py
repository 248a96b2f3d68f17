"""Asynchronous checkpoint staging done by hand (the pattern of torch.distributed.checkpoint's async_save staging
and of NeMo's / Lightning's async checkpoint IO): the state dict is copied into pinned CPU buffers with
non_blocking=True and torch.save is called on the buffers without waiting for the copies; the file holds
whatever the buffers held then.

EXPECTED: hazard
KINDS: host-read
WORLD_SIZE: 1
REASON: a non_blocking D2H copy into pinned memory returns before the copy completes (https://pytorch.org/tutorials/intermediate/pinmem_nonblock.html); torch.save reads the storages' bytes at the call (torch/serialization.py _save: zip_file.write_record of each storage).
"""
import io

import torch
import torch.nn as nn


def main():
    torch.cuda.set_device(0)
    model = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 64)).cuda()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1.5)                       # the last update before the checkpoint
    staged = {}
    for name, t in model.state_dict().items():
        buf = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
        buf.copy_(t, non_blocking=True)
        staged[name] = buf
    f = io.BytesIO()
    torch.save(staged, f)                     # BUG: no synchronize before the host reads the buffers
    torch.cuda.synchronize()
    print(len(f.getvalue()))


if __name__ == "__main__":
    main()
